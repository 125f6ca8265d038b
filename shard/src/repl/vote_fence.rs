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
//! It lifts at once when the primary the member knows was elected from empty logs with
//! this member's part: its vote, granted while its own log was empty, or its own
//! campaign from an empty log. A candidate with an empty log wins only the votes of
//! members whose logs are empty too, so a majority had no history: the set is starting,
//! and no vote of an earlier life can be lost. The file records that part (its term and
//! candidate), so a member that stopped before it followed that primary lifts the fence
//! when it starts again, if its log's first entry is of that term: only a primary
//! elected from an empty log writes the entry at index 1 in its own term. Without this,
//! every member of a set that stopped within [`GRACE`] of its first start would come
//! back fenced, and none would ever vote again.
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
    /// The (term, candidate) this member helped elect from empty logs (its vote or its
    /// own campaign, while its log was empty).
    from_empty: Option<(u64, u64)>,
}

impl VoteFence {
    /// `new_log`: the log was created by this start (nothing was on disk). `first_term`:
    /// the term of the log's entry at index 1, if it holds it.
    pub fn open(dir: &Path, new_log: bool, first_term: Option<u64>) -> io::Result<VoteFence> {
        let file = dir.join(FILE);
        if new_log {
            std::fs::write(&file, b"")?;
            super::log::sync_dir(dir)?;
        }
        let mut fence = VoteFence {
            fenced: file.exists(),
            file,
            leader_heard: None,
            from_empty: None,
        };
        if fence.fenced {
            let recorded = std::fs::read_to_string(&fence.file)?;
            fence.from_empty = parse(&recorded);
            if first_term.is_some() && fence.from_empty.map(|(t, _)| t) == first_term {
                fence.lift()?;
            }
        }
        Ok(fence)
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

    /// Notes what this member sends with an empty log (`last_index` 0): a vote granted,
    /// or a vote asked for, at a term; the candidate it backs may be elected from empty
    /// logs.
    /// What it notes is in the file before the message leaves.
    pub fn sent(&mut self, m: &Message, last_index: u64) -> io::Result<()> {
        if !self.fenced || last_index != 0 {
            return Ok(());
        }
        let backed = match m.get_msg_type() {
            MessageType::MsgRequestVoteResponse if !m.reject => (m.term, m.to),
            MessageType::MsgRequestVote => (m.term, m.from),
            _ => return Ok(()),
        };
        if self.from_empty == Some(backed) {
            return Ok(());
        }
        self.from_empty = Some(backed);
        let mut f = std::fs::File::create(&self.file)?;
        io::Write::write_all(&mut f, format!("{} {}\n", backed.0, backed.1).as_bytes())?;
        f.sync_all()
    }

    /// Called on every tick with the primary known (this member leads, or it heard one
    /// in the current term: its id and the term), and lifts the fence once the member
    /// holds entries and has known a primary for [`GRACE`], or at once if that primary
    /// was elected from empty logs with this member's part.
    pub fn tick(&mut self, leader: Option<(u64, u64)>, last_index: u64) -> io::Result<()> {
        if !self.fenced {
            return Ok(());
        }
        if leader.is_some() && self.leader_heard.is_none() {
            self.leader_heard = Some(Instant::now());
        }
        let served = self.leader_heard.is_some_and(|t| t.elapsed() >= GRACE);
        let new_set = leader.is_some_and(|(id, term)| self.from_empty == Some((term, id)));
        if !(served || new_set) || last_index == 0 {
            return Ok(());
        }
        self.lift()
    }

    fn lift(&mut self) -> io::Result<()> {
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

/// The (term, candidate) a fence file records, if any.
fn parse(recorded: &str) -> Option<(u64, u64)> {
    let mut fields = recorded.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(Ok(term)), Some(Ok(candidate))) => Some((term, candidate)),
        _ => None,
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
        let mut fence = VoteFence::open(dir.path(), true, None).unwrap();
        assert!(!fence.admits(&vote(40, 3)));
        assert!(fence.admits(&vote(0, 0)), "a starting set elects");
        assert!(!fence.may_campaign(40));
        assert!(fence.may_campaign(0));
        fence.tick(Some((2, 7)), 40).unwrap();
        assert!(fence.fenced(), "not before the grace");
        // A restart while fenced keeps the fence (the file stays).
        let mut again = VoteFence::open(dir.path(), false, None).unwrap();
        assert!(again.fenced());
        again.tick(None, 40).unwrap();
        assert!(again.fenced(), "no primary known");
        again.leader_heard = Some(Instant::now() - GRACE);
        again.tick(None, 0).unwrap();
        assert!(again.fenced(), "not with an empty log");
        again.tick(None, 40).unwrap();
        assert!(!again.fenced());
        assert!(again.admits(&vote(40, 3)));
        assert!(!VoteFence::open(dir.path(), false, None).unwrap().fenced());
    }

    fn sent(kind: MessageType, term: u64, (from, to): (u64, u64), reject: bool) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.term = term;
        m.from = from;
        m.to = to;
        m.reject = reject;
        m
    }

    /// A set that stops within the grace of its first start still elects: the members
    /// that elected its primary from empty logs lift their fences once they follow it.
    #[test]
    fn a_primary_elected_from_empty_logs_lifts_the_fences_of_those_who_elected_it() {
        use MessageType::{MsgRequestVote, MsgRequestVoteResponse};
        let dir = tempfile::tempdir().unwrap();
        let (voter_dir, leader_dir) = (dir.path().join("voter"), dir.path().join("leader"));
        std::fs::create_dir_all(&voter_dir).unwrap();
        std::fs::create_dir_all(&leader_dir).unwrap();
        let mut voter = VoteFence::open(&voter_dir, true, None).unwrap();
        // A refused vote, or one granted with entries held, proves nothing.
        voter
            .sent(&sent(MsgRequestVoteResponse, 2, (1, 3), true), 0)
            .unwrap();
        voter
            .sent(&sent(MsgRequestVoteResponse, 2, (1, 3), false), 5)
            .unwrap();
        voter.tick(Some((3, 2)), 5).unwrap();
        assert!(voter.fenced());
        voter
            .sent(&sent(MsgRequestVoteResponse, 2, (1, 3), false), 0)
            .unwrap();
        voter.tick(Some((4, 2)), 5).unwrap();
        assert!(voter.fenced(), "another primary");
        voter.tick(Some((3, 2)), 5).unwrap();
        assert!(!voter.fenced(), "the primary it elected from empty logs");
        assert!(!VoteFence::open(&voter_dir, false, None).unwrap().fenced());
        let mut leader = VoteFence::open(&leader_dir, true, None).unwrap();
        leader
            .sent(&sent(MsgRequestVote, 2, (1, 2), false), 0)
            .unwrap();
        leader.tick(Some((1, 2)), 1).unwrap();
        assert!(!leader.fenced(), "elected itself from an empty log");
    }

    /// A member that stopped before it followed the primary it helped elect from empty
    /// logs lifts the fence at its next start if its log begins in that term; not if the
    /// log begins in another (it holds a set's history from before its vote).
    #[test]
    fn the_part_in_a_first_election_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut fence = VoteFence::open(dir.path(), true, None).unwrap();
        let mut granted = Message::default();
        granted.set_msg_type(MessageType::MsgRequestVoteResponse);
        (granted.term, granted.from, granted.to) = (2, 1, 3);
        fence.sent(&granted, 0).unwrap();
        assert!(fence.fenced());
        assert!(VoteFence::open(dir.path(), false, None).unwrap().fenced());
        assert!(VoteFence::open(dir.path(), false, Some(1))
            .unwrap()
            .fenced());
        assert!(!VoteFence::open(dir.path(), false, Some(2))
            .unwrap()
            .fenced());
        let again = VoteFence::open(dir.path(), false, None).unwrap();
        assert!(!again.fenced(), "lifted for good");
    }

    #[test]
    fn a_log_that_was_there_is_not_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let fence = VoteFence::open(dir.path(), false, None).unwrap();
        assert!(!fence.fenced());
        assert!(fence.admits(&vote(40, 3)));
    }
}
