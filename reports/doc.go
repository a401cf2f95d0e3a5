// Package reports turns a run into what people and CI read: results.json
// (a versioned envelope around the checker's result, docs/results.schema.json),
// one self-contained report.html, and junit.xml.
//
// [Record] is the run's account of itself (scenario, seed, command, environment,
// faults, crashes, processes), kept in run.json; [WriteAll] writes the
// three outputs of a run folder from a Record and a [checker.Result], and
// [ReadRunDir] reads a folder back so `deliverycheck report` can render it
// again. The HTML is built from an unexported view model that tests check
// directly, as porcupine's visualization does.
package reports
