//! Overload control at the router (docs/overload.md): what keeps a connection storm or a
//! burst of commands from taking it down.
//!
//! * [`connection_rate`] and [`ingress`] admit new connections: a rate limit, then a
//!   bounded newest-first line for handshakes.
//! * [`forward_gate`] bounds the calls in flight to each shard and measures the line for
//!   the rest.
//! * [`runtime_lag`] and [`answer_time`] measure how late the router runs and answers.
//! * [`refusal`] is the cheap reply to a command refused at the front of its path.

pub mod answer_time;
pub mod connection_rate;
pub mod forward_gate;
pub mod ingress;
pub mod refusal;
pub mod runtime_lag;
