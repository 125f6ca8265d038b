//! The replica set's membership, from configuration (the same list on every member).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// Raft id: unique in the set, 1..=63.
    pub id: u64,
    /// gRPC address (host:port) of the member, for routers and peers.
    pub host: String,
    /// The site (data centre) the member runs in; reported as the `site` tag.
    #[serde(default)]
    pub site: String,
    /// Election priority: the highest-priority healthy member is the preferred primary.
    #[serde(default = "one")]
    pub priority: i64,
    /// 1 = voting member, 0 = non-voting.
    #[serde(default = "one_u32")]
    pub votes: u32,
    /// Votes, keeps the log, holds no data, never becomes primary.
    #[serde(default)]
    pub arbiter: bool,
    /// The address this member dials to reach that member, when it is not `host`: a NAT,
    /// a proxy, or the chaos runner's fault-injecting link. Only the dialling member's
    /// file needs it; `host` stays the member's name everywhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dial: Option<String>,
}

fn one() -> i64 {
    1
}
fn one_u32() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplConfig {
    pub set_name: String,
    /// This member's id.
    pub me: u64,
    pub members: Vec<MemberConfig>,
    /// fsync the Raft log before acknowledging (MongoDB's `j: true`, the default for
    /// majority writes).
    #[serde(default = "yes")]
    pub sync: bool,
    /// Raft log kept beyond what WiredTiger has checkpointed, in MiB: a member that falls
    /// further behind than this cannot catch up from the log (MongoDB's oplog window).
    #[serde(default = "default_retain_mb")]
    pub log_retain_mb: u64,
    /// Seconds of log kept beyond `log_retain_mb` (MongoDB's `oplogMinRetentionHours`):
    /// change streams resume from any point in this window. 0: size only.
    #[serde(default)]
    pub log_retain_secs: u64,
    /// The most log, in MiB, that `log_retain_secs` may keep: past it the oldest history
    /// goes (a stream resuming there gets ChangeStreamHistoryLost) rather than the disk
    /// filling up.
    #[serde(default = "default_retain_max_mb")]
    pub log_retain_max_mb: u64,
    /// Seconds between checkpoint-and-compact passes.
    #[serde(default = "default_compact_secs")]
    pub compact_interval_secs: u64,
    /// Size in KiB at which the Raft log starts a new file. Compaction deletes whole
    /// files, so the log on disk exceeds `log_retain_mb` by at most about one file.
    #[serde(default = "default_segment_kb")]
    pub log_segment_kb: u64,
    /// Seconds of history kept for reads at a past cluster time (MongoDB's
    /// `minSnapshotHistoryWindowInSeconds`): the oldest timestamp trails the newest
    /// applied entry's time by this much.
    #[serde(default = "default_history_secs")]
    pub history_window_secs: u64,
    /// The most a transaction's writes take of one log entry, in KiB. The writes of a
    /// larger transaction are split over several entries and still apply at once
    /// (`repl::txn_parts`), as MongoDB splits a transaction over 16 MB over several
    /// oplog entries. 0 gives every write an entry of its own, as tests and the chaos
    /// runner use to drive that path (as MongoDB's tests lower
    /// `maxNumberOfTransactionOperationsInSingleOplogEntry`).
    #[serde(default = "default_txn_entry_kb")]
    pub txn_entry_kb: u64,
}

/// Bounds of `txn_entry_kb`.
const TXN_ENTRY_KB: std::ops::RangeInclusive<u64> = 0..=64 * 1024;

fn yes() -> bool {
    true
}
fn default_retain_mb() -> u64 {
    256
}
fn default_retain_max_mb() -> u64 {
    16 * 1024
}
fn default_compact_secs() -> u64 {
    30
}
fn default_segment_kb() -> u64 {
    64 * 1024
}
fn default_txn_entry_kb() -> u64 {
    16 * 1024
}
fn default_history_secs() -> u64 {
    300
}

impl ReplConfig {
    /// A set's configuration with the default log retention and compaction interval.
    pub fn new(set_name: &str, me: u64, members: Vec<MemberConfig>) -> ReplConfig {
        ReplConfig {
            set_name: set_name.to_string(),
            me,
            members,
            sync: true,
            log_retain_mb: default_retain_mb(),
            log_retain_secs: 0,
            log_retain_max_mb: default_retain_max_mb(),
            compact_interval_secs: default_compact_secs(),
            log_segment_kb: default_segment_kb(),
            history_window_secs: default_history_secs(),
            txn_entry_kb: default_txn_entry_kb(),
        }
    }

    pub fn me(&self) -> Result<&MemberConfig, String> {
        self.members
            .iter()
            .find(|m| m.id == self.me)
            .ok_or_else(|| format!("member id {} is not in the member list", self.me))
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.set_name.is_empty() {
            return Err("set_name must be set".into());
        }
        let mut ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.members.len() {
            return Err("member ids must be unique".into());
        }
        if ids.iter().any(|&id| id == 0 || id > 63) {
            return Err("member ids must be in 1..=63".into());
        }
        if !self.members.iter().any(|m| m.votes > 0 && !m.arbiter) {
            return Err("a replica set needs at least one voting data member".into());
        }
        if self.compact_interval_secs == 0 {
            return Err("compact_interval_secs must be positive".into());
        }
        if self.log_segment_kb == 0 {
            return Err("log_segment_kb must be positive".into());
        }
        if !TXN_ENTRY_KB.contains(&self.txn_entry_kb) {
            return Err(format!(
                "txn_entry_kb must be in {}..={}",
                TXN_ENTRY_KB.start(),
                TXN_ENTRY_KB.end()
            ));
        }
        if self.log_retain_secs > u64::from(u32::MAX) {
            return Err("log_retain_secs is too large".into());
        }
        if self.members.iter().any(|m| m.votes > 1) {
            return Err("votes must be 0 or 1".into());
        }
        self.me()?;
        Ok(())
    }

    /// Members that hold data.
    pub fn data_members(&self) -> usize {
        self.members.iter().filter(|m| !m.arbiter).count()
    }
}
