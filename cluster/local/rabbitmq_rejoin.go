package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// RabbitMQPeer is another node of a cluster, as a wiped node's rejoin
// asks it to forget the node that was lost. Up, when set, says cheaply
// whether the peer runs at all (a peer that does not is not asked).
type RabbitMQPeer struct {
	Name string
	Eval RabbitMQEval
	Up   func() bool
}

// RabbitMQForget makes a running peer forget node (its Erlang name,
// rabbit@rabbitmq-1), as rabbitmqctl forget_cluster_node does
// (rabbit_mnesia:forget_cluster_node, then rabbit_quorum_queue:shrink_all):
// the node's classic queues are deleted with it, its quorum queues lose
// their member there and keep their majority elsewhere. It retries while
// the peers still see the node running (just after a kill) until ctx
// ends, and says what it did. A node already forgotten (a rejoin retried)
// is not an error. Both runtimes' nodes rejoin through it. The classic
// queues counted are every queue whose process was on node (a quorum
// queue's "pid" is a Raft member id, not a pid), from both list and
// list_down: 3.10.8 answers only the second with them, 4.0.5 only the
// first.
func RabbitMQForget(ctx context.Context, log *slog.Logger, node, name string, peers []RabbitMQPeer) (string, error) {
	expr := `N = ` + erlAtom(node) + `, ` +
		`Classic = length(lists:usort([amqqueue:get_name(Q) || V <- rabbit_vhost:list_names(), Q <- rabbit_amqqueue:list(V) ++ rabbit_amqqueue:list_down(V), is_pid(amqqueue:get_pid(Q)), node(amqqueue:get_pid(Q)) =:= N])), ` +
		`case rabbit_mnesia:forget_cluster_node(N, false) of ` +
		`ok -> R = rabbit_quorum_queue:shrink_all(N), ` +
		`lists:flatten(io_lib:format("ok ~b ~b ~b", [length([x || {_, {ok, _}} <- R]), length(R), Classic])); ` +
		`E -> [C || C <- lists:flatten(io_lib:format("~w", [E])), C =/= $", C =/= $\\] end.`
	var last error
	for {
		for _, peer := range peers {
			if peer.Up != nil && !peer.Up() {
				continue
			}
			ectx, cancel := context.WithTimeout(ctx, viewTimeout)
			out, err := peer.Eval(ectx, expr)
			cancel()
			var shrunk, queues, classic int
			switch {
			case err != nil:
				last = fmt.Errorf("%s: %w", peer.Name, err)
			case strings.Contains(out, "not_a_cluster_node"):
				return fmt.Sprintf("%s was forgotten already (%s)", name, peer.Name), nil
			default:
				if _, serr := fmt.Sscanf(out, "ok %d %d %d", &shrunk, &queues, &classic); serr != nil {
					last = fmt.Errorf("%s: forget_cluster_node: %s", peer.Name, out)
					break
				}
				log.Info("forgotten", "by", peer.Name, "quorum_queues_shrunk", shrunk, "classic_queues_deleted", classic)
				return fmt.Sprintf("%s forgotten by %s (removed from %d of %d quorum queues; %s deleted with it)",
					name, peer.Name, shrunk, queues, plural(classic, "classic queue")), nil
			}
		}
		if last == nil {
			last = errors.New("no other node runs")
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("forget %s: %w (last: %v)", node, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RabbitMQGrow adds a member on node (its Erlang name) to every quorum
// queue that has none there, through eval on that node (what
// rabbitmq-queues grow <node> all does), and says how many. A queue whose
// member could not be added (its leader busy electing) is tried again
// until ctx ends: grow passes over the queues that have one already.
func RabbitMQGrow(ctx context.Context, eval RabbitMQEval, node, name string) (string, error) {
	added := 0
	for {
		out, err := eval(ctx, `R = rabbit_quorum_queue:grow(`+erlAtom(node)+`, <<".*">>, <<".*">>, all), `+
			`lists:flatten(io_lib:format("~b ~b", [length([x || {_, {ok, _}} <- R]), length(R)])).`)
		if err != nil {
			return "", fmt.Errorf("grow quorum queues: %w", err)
		}
		var ok, all int
		if _, err := fmt.Sscanf(out, "%d %d", &ok, &all); err != nil {
			return "", fmt.Errorf("grow quorum queues: unexpected answer %q", out)
		}
		added += ok
		if ok == all {
			return fmt.Sprintf("added back to %s", plural(added, "quorum queue")), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("grow quorum queues: %d without a member on %s: %w", all-ok, name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// erlAtom is s as a quoted Erlang atom.
func erlAtom(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// plural is "1 queue", "3 queues".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
