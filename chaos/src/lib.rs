//! Chaos scenarios: a workload recorded as a history, a fault, and checkers.

pub mod check;
pub mod history;
pub mod plot;
