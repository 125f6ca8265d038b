//! A member whose Raft log is new votes for no one who already has a log, and asks for
//! no votes, until it has followed a primary for a while.
//!
//! Raft's safety rests on a vote being durable: a member votes once per term. A member
//! whose disk was wiped comes back at term 1 with no record of the vote it cast before,
//! so without this fence it could vote again in that term, for another candidate, and
//! two primaries could be elected in one term. A new log cannot tell a wipe from a first
//! start, so the fence is raised on every new log and told apart by the candidates:
//! when a set starts, every candidate's log is empty too, and those votes are granted.
//!
//! It lifts once the member holds entries and has known a primary (followed one, or led)
//! for [`GRACE`], longer than any election timeout, so an election that was under way
//! when the disk was lost has ended. It is a file in the log directory, so a crash while
//! it stands does not lift it.
//!
//! What remains: a candidate that reaches the lost vote's term only after the grace
//! (partitioned the whole time, while the primary the member follows has a lower term)
//! could still be granted a second vote in it. MongoDB's answer is the same as Raft's:
//! a member that lost its data rejoins under a new identity (membership changes).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use raft::eraftpb::{Message, MessageType};

/// How long a member with a new log follows a primary before it votes.
pub const GRACE: Duration = Duration::from_secs(3);

const FILE: &str = "vote-fence";

pub struct VoteFence {
    file: PathBuf,
    fenced: bool,
    /// When this member first heard a primary since it started.
    leader_heard: Option<Instant>,
}

impl VoteFence {
    /// `new_log`: the log was created by this start (nothing was on disk).
    pub fn open(dir: &Path, new_log: bool) -> io::Result<VoteFence> {
        let file = dir.join(FILE);
        if new_log {
            std::fs::write(&file, b"")?;
            super::log::sync_dir(dir)?;
        }
        Ok(VoteFence {
            fenced: file.exists(),
            file,
            leader_heard: None,
        })
    }

    /// Whether this member may grant the vote `m` asks for (other messages pass).
    pub fn admits(&self, m: &Message) -> bool {
        if !self.fenced || m.get_msg_type() != MessageType::MsgRequestVote {
            return true;
        }
        // A candidate with an empty log: the set is starting, no vote was cast before.
        m.index == 0 && m.log_term == 0
    }

    /// Whether this member may ask for votes: with an empty log only (a starting set).
    pub fn may_campaign(&self, last_index: u64) -> bool {
        !self.fenced || last_index == 0
    }

    /// Called on every tick: notes whether a primary is known (this member leads, or it
    /// heard one in the current term), and lifts the fence once the member holds entries
    /// and has known a primary for [`GRACE`].
    pub fn tick(&mut self, leader_known: bool, last_index: u64) -> io::Result<()> {
        if !self.fenced {
            return Ok(());
        }
        if leader_known && self.leader_heard.is_none() {
            self.leader_heard = Some(Instant::now());
        }
        let served = self.leader_heard.is_some_and(|t| t.elapsed() >= GRACE);
        if !served || last_index == 0 {
            return Ok(());
        }
        match std::fs::remove_file(&self.file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.fenced = false;
        tracing::info!("vote fence lifted: this member votes again");
        Ok(())
    }

    pub fn fenced(&self) -> bool {
        self.fenced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(index: u64, log_term: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgRequestVote);
        m.index = index;
        m.log_term = log_term;
        m.term = 7;
        m
    }

    #[test]
    fn a_new_log_grants_no_vote_to_a_candidate_with_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut fence = VoteFence::open(dir.path(), true).unwrap();
        assert!(!fence.admits(&vote(40, 3)));
        assert!(fence.admits(&vote(0, 0)), "a starting set elects");
        assert!(!fence.may_campaign(40));
        assert!(fence.may_campaign(0));
        fence.tick(true, 40).unwrap();
        assert!(fence.fenced(), "not before the grace");
        // A restart while fenced keeps the fence (the file stays).
        let mut again = VoteFence::open(dir.path(), false).unwrap();
        assert!(again.fenced());
        again.tick(false, 40).unwrap();
        assert!(again.fenced(), "no primary known");
        again.leader_heard = Some(Instant::now() - GRACE);
        again.tick(false, 0).unwrap();
        assert!(again.fenced(), "not with an empty log");
        again.tick(false, 40).unwrap();
        assert!(!again.fenced());
        assert!(again.admits(&vote(40, 3)));
        assert!(!VoteFence::open(dir.path(), false).unwrap().fenced());
    }

    #[test]
    fn a_log_that_was_there_is_not_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let fence = VoteFence::open(dir.path(), false).unwrap();
        assert!(!fence.fenced());
        assert!(fence.admits(&vote(40, 3)));
    }
}
