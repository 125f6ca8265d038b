//! The chaos scenario runner: workloads recorded as histories, faults (process, network,
//! failpoints), and checkers (no acknowledged write lost, linearizable histories,
//! recovery). Skeleton: scenarios arrive with issue #7.
