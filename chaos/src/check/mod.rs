//! Checkers: each reads a history (and what the cluster holds after the run) and says
//! what went wrong, if anything.

pub mod bank;
pub mod effects;
pub mod errors;
pub mod linearizable;
pub mod lost_writes;
pub mod members_agree;
pub mod recovery;
pub mod si;
pub mod storm;
pub mod txn_lists;
