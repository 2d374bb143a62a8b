// Package mixedversion holds no code: its tests run raftlock clusters of
// `lockgate node` processes built from different revisions side by side —
// today's binary beside the last one before the format gate — and the
// rolling upgrade and downgrade drill (`lockgate-bench upgrade`) between
// them, the way an operator's rolling upgrade mixes them.
package mixedversion
