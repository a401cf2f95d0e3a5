package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Kafka user of a run's own (the intruder's, docs/security.md): a
// SCRAM-SHA-256 credential the broker checks on its SASL listener, and at
// most one ACL, WRITE on the events topic. The broker's authorizer
// (StandardAuthorizer) decides every request of that user by its ACLs
// alone; the harness's own clients, on the plaintext listener, are the
// broker's super user and are not affected.

// kafkaSCRAMIterations is what the user's salted password is made with
// (Kafka's minimum is 4096).
const kafkaSCRAMIterations = 4096

// CreateKafkaUser creates user with password on cfg's broker, through an
// admin client of cfg (the harness's, a super user), and, when write is
// set, the one ACL that lets the user write to cfg's events topic. Without
// it the user has no ACL at all: every produce to the topic is refused
// with TOPIC_AUTHORIZATION_FAILED.
func CreateKafkaUser(ctx context.Context, cfg KafkaConfig, user, password string, write bool) error {
	cfg = cfg.withDefaults()
	return withKafkaAdmin(cfg, func(adm *kadm.Client) error {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
			User: user, Mechanism: kadm.ScramSha256, Iterations: kafkaSCRAMIterations, Password: password,
		}})
		if err == nil {
			err = scramErrs(res)
		}
		if err != nil {
			return fmt.Errorf("kafka: create user %s: %w", user, err)
		}
		if !write {
			return nil
		}
		acl := kadm.NewACLs().Allow(kafkaPrincipal(user)).Topics(cfg.Topic).
			Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
		created, err := adm.CreateACLs(ctx, acl)
		if err == nil {
			for _, c := range created {
				err = errors.Join(err, c.Err)
			}
		}
		if err != nil {
			return fmt.Errorf("kafka: allow %s to write %s: %w", user, cfg.Topic, err)
		}
		return nil
	})
}

// DeleteKafkaUser removes user's ACLs and credential. Deleting a user
// that does not exist is not an error, so a run's cleanup may call it
// whether or not the create got that far.
func DeleteKafkaUser(ctx context.Context, cfg KafkaConfig, user string) error {
	cfg = cfg.withDefaults()
	return withKafkaAdmin(cfg, func(adm *kadm.Client) error {
		filter := kadm.NewACLs().Allow(kafkaPrincipal(user)).AllowHosts().AnyResource().
			Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny)
		deleted, err := adm.DeleteACLs(ctx, filter)
		if err == nil {
			for _, d := range deleted {
				err = errors.Join(err, d.Err)
			}
		}
		if err != nil {
			return fmt.Errorf("kafka: delete %s's ACLs: %w", user, err)
		}
		res, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: kadm.ScramSha256}}, nil)
		if err == nil {
			err = scramErrs(res)
		}
		if err != nil && !errors.Is(err, kerr.ResourceNotFound) {
			return fmt.Errorf("kafka: delete user %s: %w", user, err)
		}
		return nil
	})
}

// KafkaUserExists reports whether user has a SCRAM credential on cfg's
// broker.
func KafkaUserExists(ctx context.Context, cfg KafkaConfig, user string) (bool, error) {
	cfg = cfg.withDefaults()
	var found bool
	err := withKafkaAdmin(cfg, func(adm *kadm.Client) error {
		users, err := adm.DescribeUserSCRAMs(ctx)
		if err != nil {
			return fmt.Errorf("kafka: describe users: %w", err)
		}
		u, ok := users[user]
		found = ok && u.Err == nil && len(u.CredInfos) > 0
		return nil
	})
	return found, err
}

// scramErrs joins the per-user errors of an alter.
func scramErrs(res kadm.AlteredUserSCRAMs) error {
	var err error
	res.EachError(func(a kadm.AlteredUserSCRAM) { err = errors.Join(err, fmt.Errorf("%w (%s)", a.Err, a.ErrMessage)) })
	return err
}

// kafkaPrincipal is the ACL principal of a SASL user.
func kafkaPrincipal(user string) string { return "User:" + user }

// withKafkaAdmin runs f with an admin client of cfg.
func withKafkaAdmin(cfg KafkaConfig, f func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(cfg.clientOpts("admin")...)
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	defer cl.Close()
	return f(kadm.NewClient(cl))
}
