//! A check of a Raft message's bytes before rust-protobuf parses them. raft 0.7 pins
//! protobuf 2, whose parser recurses without bound on nested groups (RUSTSEC-2024-0437):
//! a crafted message can overflow the stack of the member that parses it. Only a peer
//! holding the cluster key reaches the parser, but a member must not die of one bad
//! frame, so the frame is walked here first, iteratively, against the shape of the
//! messages raft sends (`eraftpb.proto`): it contains no groups at all, and its message
//! fields nest four levels at most. Anything else is refused before parsing.

/// How a field's payload is read.
#[derive(Clone, Copy)]
enum Shape {
    /// `Message`: `entries` (7) are `Entry`, `snapshot` (9) a `Snapshot`.
    Message,
    /// `Entry`: scalars and bytes only.
    Entry,
    /// `Snapshot`: `metadata` (2) is a `SnapshotMetadata`.
    Snapshot,
    /// `SnapshotMetadata`: `conf_state` (1) is a `ConfState`.
    SnapshotMetadata,
    /// `ConfState` (packed or plain integer lists) and anything else: no nested message.
    Leaf,
}

impl Shape {
    /// The shape of field `field`'s payload, when it is a nested message.
    fn nested(self, field: u64) -> Option<Shape> {
        match (self, field) {
            (Shape::Message, 7) => Some(Shape::Entry),
            (Shape::Message, 9) => Some(Shape::Snapshot),
            (Shape::Snapshot, 2) => Some(Shape::SnapshotMetadata),
            (Shape::SnapshotMetadata, 1) => Some(Shape::Leaf),
            _ => None,
        }
    }
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at).ok_or("truncated varint")?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// Walks the fields of a Raft `Message`; an error names what is wrong with it.
pub fn check_message(bytes: &[u8]) -> Result<(), String> {
    // (shape, end) of each open nested message: at most four, so no recursion.
    let mut open: Vec<(Shape, usize)> = vec![(Shape::Message, bytes.len())];
    let mut at = 0;
    while let Some(&(shape, end)) = open.last() {
        if at == end {
            open.pop();
            continue;
        }
        let tag = varint(bytes, &mut at)?;
        let (field, wire_type) = (tag >> 3, tag & 7);
        if field == 0 {
            return Err("field number 0".into());
        }
        match wire_type {
            0 => {
                varint(bytes, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = usize::try_from(varint(bytes, &mut at)?).map_err(|e| e.to_string())?;
                let field_end = at.checked_add(len).ok_or("length overflows")?;
                if field_end > end {
                    return Err("a field runs past its message".into());
                }
                match shape.nested(field) {
                    Some(inner) => open.push((inner, field_end)),
                    None => at = field_end,
                }
            }
            3 | 4 => return Err("groups are not part of any Raft message".into()),
            other => return Err(format!("unknown wire type {other}")),
        }
        if at > end {
            return Err("a field runs past its message".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::Message as _;
    use raft::eraftpb::{ConfState, Entry, Message, MessageType, Snapshot};

    fn real_message() -> Vec<u8> {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = 2;
        m.from = 1;
        m.term = 7;
        m.mut_entries().push(Entry {
            index: 9,
            data: vec![0x0b, 0x1f, 0x00, 0x18, 0xff].into(),
            ..Default::default()
        });
        let mut s = Snapshot::default();
        s.mut_metadata().set_conf_state(ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        });
        s.data = b"snapshot bytes with a group tag \x0b inside"
            .to_vec()
            .into();
        m.set_snapshot(s);
        m.write_to_bytes().unwrap()
    }

    #[test]
    fn messages_raft_sends_pass() {
        check_message(&real_message()).unwrap();
        check_message(&Message::default().write_to_bytes().unwrap()).unwrap();
    }

    #[test]
    fn nested_groups_are_refused_before_the_parser_recurses() {
        // Field 15 as a start-group, a million times: protobuf 2 recurses once per level.
        let mut evil = real_message();
        evil.extend(std::iter::repeat_n(0x7b_u8, 1_000_000));
        assert!(check_message(&evil).is_err());
        // The same hidden inside an entry.
        let mut entry = vec![0x7b_u8; 100_000];
        let mut m = vec![0x3a];
        let mut len = entry.len();
        while len >= 0x80 {
            m.push((len as u8) | 0x80);
            len >>= 7;
        }
        m.push(len as u8);
        m.append(&mut entry);
        assert!(check_message(&m).is_err());
    }

    /// Random and mutated frames: the check never panics, and whatever it lets through
    /// the parser handles without crashing.
    #[test]
    fn random_frames_never_panic() {
        let real = real_message();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000 {
            let mut bytes = if round % 2 == 0 {
                real.clone()
            } else {
                (0..next() % 64).map(|_| next() as u8).collect()
            };
            for _ in 0..(next() % 4) {
                if !bytes.is_empty() {
                    let i = (next() as usize) % bytes.len();
                    bytes[i] = next() as u8;
                }
            }
            if check_message(&bytes).is_ok() {
                let _ = Message::parse_from_bytes(&bytes);
            }
        }
    }
}
