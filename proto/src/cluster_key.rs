//! Internal authentication between nodes with a shared cluster key: the caller sends it
//! in a gRPC metadata header on every call, the server compares it in constant time and
//! refuses calls without it. As MongoDB's keyfile, a key file may hold several keys: a
//! node sends the first and accepts any, so the key rotates without downtime (add the new
//! key second everywhere, then first, then drop the old one: three rolling restarts).

use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// The gRPC metadata key carrying the cluster key.
pub const HEADER: &str = "x-bulwark-cluster-key";

/// Shortest key accepted: a guessable key would authenticate nothing.
pub const MIN_LEN: usize = 16;

/// The keys a node holds: it sends the first and accepts any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterKey {
    keys: Vec<String>,
}

impl ClusterKey {
    pub fn single(key: String) -> ClusterKey {
        ClusterKey { keys: vec![key] }
    }

    /// The key this node presents.
    pub fn sent(&self) -> &str {
        &self.keys[0]
    }

    /// Whether `presented` is one of the keys, compared without leaking through timing
    /// how much of one matched.
    pub fn verify(&self, presented: Option<&[u8]>) -> bool {
        let Some(p) = presented else {
            return false;
        };
        // Every key is compared, so the time does not tell which one matched.
        self.keys
            .iter()
            .fold(false, |any, k| any | bool::from(p.ct_eq(k.as_bytes())))
    }
}

/// A server's check of a call: it must carry one of `key`'s keys (when one is set).
#[allow(clippy::result_large_err)]
pub fn admit(key: Option<&ClusterKey>, metadata: &MetadataMap) -> Result<(), Status> {
    let Some(key) = key else {
        return Ok(());
    };
    let presented = metadata.get(HEADER).map(|v| v.as_bytes());
    match key.verify(presented) {
        true => Ok(()),
        false => Err(Status::unauthenticated("missing or wrong cluster key")),
    }
}

/// The keys from the config value (one key), or else from the key file; `None` when
/// neither is set.
pub fn load(key: &str, file: &str) -> Result<Option<ClusterKey>, String> {
    if !key.is_empty() {
        return ClusterKey::parse(key).map(Some);
    }
    if file.is_empty() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("reading cluster_key_file {file}: {e}"))?;
    ClusterKey::parse(&text)
        .map(Some)
        .map_err(|e| format!("cluster_key_file {file}: {e}"))
}

impl ClusterKey {
    /// Keys separated by white space (one per line in a key file), the sent one first.
    pub fn parse(text: &str) -> Result<ClusterKey, String> {
        let keys: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        if keys.is_empty() {
            return Err("no cluster key".into());
        }
        for key in &keys {
            if key.len() < MIN_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "the cluster key must be at least {MIN_LEN} printable ASCII characters"
                ));
            }
        }
        Ok(ClusterKey { keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(load("short", "").is_err());
        assert_eq!(load("", "").unwrap(), None);
        let k = load("0123456789abcdef0123", "").unwrap().unwrap();
        assert!(k.verify(Some(k.sent().as_bytes())));
        assert!(!k.verify(Some(b"0123456789abcdef0124")));
        assert!(!k.verify(Some(b"0123")));
        assert!(!k.verify(None));
    }

    #[test]
    fn a_key_file_with_two_keys_sends_the_first_and_accepts_both() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        let (new, old) = ("new-key-0123456789abcdef", "old-key-0123456789abcdef");
        std::fs::write(&file, format!("{new}\n{old}\n")).unwrap();
        let k = load("", file.to_str().unwrap()).unwrap().unwrap();
        assert_eq!(k.sent(), new);
        assert!(k.verify(Some(new.as_bytes())));
        assert!(k.verify(Some(old.as_bytes())));
        assert!(!k.verify(Some(b"another-key-0123456789ab")));
        std::fs::write(&file, format!("{new}\nshort\n")).unwrap();
        assert!(
            load("", file.to_str().unwrap()).is_err(),
            "every key is checked"
        );
        std::fs::write(&file, "\n").unwrap();
        assert!(load("", file.to_str().unwrap()).is_err(), "an empty file");
    }
}
