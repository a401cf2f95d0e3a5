// Package nemesis breaks a running pipeline on purpose: it kills, pauses
// and restarts servers and workers, arms failpoints, and partitions, slows
// or resets network links, each recorded in the history as a fault that
// starts and stops. A [Schedule] is a fixed timeline or a seeded random
// mix; every schedule ends by healing everything.
//
// Read [Fault], [Step] and [ParseStep] first: a step is written the way a
// person says it, "at 10s: partition kafka for 5s". Then [Env] (what the
// faults act on) and [Schedule.Run].
//
// # Running a schedule
//
//	env := &nemesis.Env{Cluster: run.Cluster(), Workers: run.Supervisor(),
//		Recorder: run.Recorder(), Broker: "kafka"}
//	targets := nemesis.DefaultTargets(run.Supervisor().Names())
//	sched := nemesis.Random(seed, []string{"process", "network"}, 5*time.Second, 60*time.Second, targets)
//	sched.Steps = append(sched.Steps, timeline...) // a fixed part, if any
//	err := sched.Run(ctx, env) // cancel ctx to stop early: it still heals
//
// While it runs, [Env.Active] lists the faults in force. [HealAll] heals
// everything at any time (Run calls it last).
//
// # History
//
// Every fault is a fault op of type invoke when it starts and one
// completion when it is healed, with value.fault the kind, value.target
// what it hit and value.detail the step as text. The completion says
// whether the fault took effect: ok with value.evidence (the killed
// process's exit status, the failpoint hits its workers reported, what
// its link counted during the window), fail with value.error when it
// could not be injected or was in place and never bit (a failpoint never
// hit, a window no connection crossed), info if a heal failed. A step of
// a random schedule adds value.reason "random" to both. A kill also
// records a crash op per process it killed, and the start of a killed
// server a restart op. The schedule itself is one ok fault op with
// value.fault "schedule" and, in value.detail, where its steps came from
// ("fixed: " for a timeline, "seed=N: " for a random schedule) and every
// step.
// See docs/history.md.
package nemesis
