// Package history records and reads the JSONL histories of a run: the [Op]
// each process writes through a [Recorder], read back with [Read] or
// streamed from several files at once with [ScanFiles].
//
// An op is one JSON object per line, in the spirit of Jepsen: an index, a
// time in nanoseconds since the run started, the writing process, a [Type]
// (invoke, ok, fail, info), what was attempted ([F]: commit, publish,
// deliver, apply, ...) and a [Value]. docs/history.md in the repository
// documents the format for components that write it themselves.
//
// # Torn lines
//
// A process killed while writing leaves at most one torn line. Readers keep
// every op around it and report the line as a [Cut]; they fail only on a
// file that is not a history at all.
//
// # Merging
//
// [Merge] and [ScanFiles] order the ops of several files by Time, then
// Process, then file order, and renumber Index from 0. [ScanFiles] decodes
// in parallel chunks with a dedicated scanner for the documented shape
// (falling back to encoding/json for anything else) and streams the merged
// ops, so memory does not grow with the history; [ScanFilesOrSort] also
// takes files not ordered by time, which it reads whole and sorts.
package history
