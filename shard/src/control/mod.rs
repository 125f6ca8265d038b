//! How a member spends its threads and time under load. Each module answers one question
//! the service asks about every command: may it start and in what order (`admission`),
//! may it run on the gRPC task instead of the blocking pool (`point_read`), when must it
//! stop (`deadline`), who can see and stop it (`ops`: `currentOp`, `killOp`), and how many
//! reads may run at once (`throughput_probe`). A deadline check is also the point where a
//! long read gives its admission ticket back and notices `killOp`, so `admission`,
//! `deadline` and `ops` lean on each other.

pub mod admission;
pub mod deadline;
pub mod ops;
pub mod point_read;
pub mod throughput_probe;
