//! `$readPreference`: which members may answer a read (mode, tag sets,
//! maxStalenessSeconds), as the server-selection spec defines it.

use bson::{Bson, Document};
use wire::{MongoError, MongoResult};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

#[derive(Debug, Clone, Default)]
pub struct ReadPreference {
    pub mode: Mode,
    /// Tag sets in order of preference; a member matches a set when it has every tag.
    /// Members carry one tag, `site`.
    pub tag_sets: Vec<Document>,
    pub max_staleness_secs: Option<i64>,
}

impl ReadPreference {
    pub fn parse(v: Option<&Bson>) -> MongoResult<ReadPreference> {
        let d = match v {
            None | Some(Bson::Null) => return Ok(ReadPreference::default()),
            Some(Bson::Document(d)) => d,
            Some(_) => {
                return Err(MongoError::failed_to_parse(
                    "$readPreference must be an object",
                ))
            }
        };
        let mode = match d.get_str("mode") {
            Ok("primary") => Mode::Primary,
            Ok("primaryPreferred") => Mode::PrimaryPreferred,
            Ok("secondary") => Mode::Secondary,
            Ok("secondaryPreferred") => Mode::SecondaryPreferred,
            Ok("nearest") => Mode::Nearest,
            Ok(other) => {
                return Err(MongoError::failed_to_parse(format!(
                    "Could not parse $readPreference mode '{other}'"
                )))
            }
            Err(_) => return Err(MongoError::failed_to_parse("$readPreference needs a mode")),
        };
        let tag_sets: Vec<Document> = match d.get("tags") {
            None => Vec::new(),
            Some(Bson::Array(a)) => a
                .iter()
                .map(|t| {
                    t.as_document()
                        .cloned()
                        .ok_or_else(|| MongoError::failed_to_parse("tag sets must be objects"))
                })
                .collect::<MongoResult<_>>()?,
            Some(_) => return Err(MongoError::failed_to_parse("tags must be an array")),
        };
        let max_staleness_secs = match d.get("maxStalenessSeconds") {
            None => None,
            Some(b) => Some(match b {
                Bson::Int32(n) => i64::from(*n),
                Bson::Int64(n) => *n,
                Bson::Double(f) => *f as i64,
                _ => {
                    return Err(MongoError::failed_to_parse(
                        "maxStalenessSeconds must be a number",
                    ))
                }
            }),
        };
        if mode == Mode::Primary
            && (!tag_sets.iter().all(Document::is_empty)
                || max_staleness_secs.is_some_and(|s| s > 0))
        {
            return Err(MongoError::failed_to_parse(
                "Only empty tags are allowed with primary read preference",
            ));
        }
        if let Some(s) = max_staleness_secs {
            // The spec's floor: 90 s (heartbeat + idle write period); -1 means none.
            if s != -1 && s < 90 {
                return Err(MongoError::bad_value(format!(
                    "maxStalenessSeconds must be at least 90 seconds, not {s}"
                )));
            }
        }
        Ok(ReadPreference {
            mode,
            tag_sets,
            max_staleness_secs,
        })
    }

    /// Whether a member in `site` matches the first tag set any member could match; with
    /// one tag per member this is: some set is empty or names this site.
    pub fn tags_match(&self, site: &str) -> bool {
        self.tag_sets.is_empty()
            || self.tag_sets.iter().any(|set| {
                set.iter()
                    .all(|(k, v)| k == "site" && v.as_str() == Some(site))
            })
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn parses_modes_tags_and_rejects_bad_ones() {
        let rp = ReadPreference::parse(Some(&Bson::Document(
            doc! {"mode": "nearest", "tags": [{"site": "B"}, {}]},
        )))
        .unwrap();
        assert_eq!(rp.mode, Mode::Nearest);
        assert!(rp.tags_match("B"));
        assert!(rp.tags_match("A"), "the empty set matches any member");
        let only_b = ReadPreference::parse(Some(&Bson::Document(
            doc! {"mode": "secondary", "tags": [{"site": "B"}]},
        )))
        .unwrap();
        assert!(!only_b.tags_match("A"));
        assert!(ReadPreference::parse(Some(&Bson::Document(doc! {"mode": "sideways"}))).is_err());
        assert!(ReadPreference::parse(Some(&Bson::Document(
            doc! {"mode": "primary", "tags": [{"site": "A"}]}
        )))
        .is_err());
        assert!(ReadPreference::parse(Some(&Bson::Document(
            doc! {"mode": "secondary", "maxStalenessSeconds": 10}
        )))
        .is_err());
        assert_eq!(ReadPreference::parse(None).unwrap().mode, Mode::Primary);
    }
}
