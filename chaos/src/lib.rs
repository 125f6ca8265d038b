//! Chaos scenarios: a workload recorded as a history, a fault, and checkers.
//!
//! `bulwark chaos <scenario> --target local` ([`run::run`]) starts a three-site cluster
//! of separate processes ([`local`]) whose links go through fault-injecting proxies
//! ([`proxy`]), runs the [`workload`], applies the [`scenario`]'s fault, and checks the
//! history ([`check`]); it writes a JSON report and a [`plot`] of the [`timeline`].
//! `--target compose` runs the same scenarios against the docker-compose cluster
//! ([`compose`]); both targets implement [`cluster::Cluster`].

pub mod api_workload;
pub mod bank_workload;
pub mod check;
pub mod cluster;
pub mod compose;
pub mod direct;
pub mod disk;
pub mod history;
pub mod local;
pub mod overload;
pub mod plot;
pub mod proc_stat;
pub mod proxy;
pub mod raw_client;
pub mod raw_pool;
pub mod refusal_cost;
pub mod run;
pub mod scenario;
pub mod storm;
pub mod timeline;
pub mod txn_workload;
pub mod workload;
