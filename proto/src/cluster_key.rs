//! Internal authentication between nodes with a shared cluster key: the caller sends it
//! in a gRPC metadata header on every call, the server compares it in constant time and
//! refuses calls without it. (Mutual TLS can replace this later without changing callers.)

use subtle::ConstantTimeEq;

/// The gRPC metadata key carrying the cluster key.
pub const HEADER: &str = "x-bulwark-cluster-key";

/// Shortest key accepted: a guessable key would authenticate nothing.
pub const MIN_LEN: usize = 16;

/// The key from the config value, or else from the key file; `None` when neither is set.
pub fn load(key: &str, file: &str) -> Result<Option<String>, String> {
    let key = if !key.is_empty() {
        key.to_string()
    } else if !file.is_empty() {
        std::fs::read_to_string(file)
            .map_err(|e| format!("reading cluster_key_file {file}: {e}"))?
            .trim()
            .to_string()
    } else {
        return Ok(None);
    };
    if key.len() < MIN_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the cluster key must be at least {MIN_LEN} printable ASCII characters"
        ));
    }
    Ok(Some(key))
}

/// Compares a presented key with the expected one without leaking, through timing, how
/// much of it matched.
pub fn verify(expected: &str, presented: Option<&[u8]>) -> bool {
    presented.is_some_and(|p| bool::from(p.ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(load("short", "").is_err());
        assert_eq!(load("", "").unwrap(), None);
        let k = load("0123456789abcdef0123", "").unwrap().unwrap();
        assert!(verify(&k, Some(k.as_bytes())));
        assert!(!verify(&k, Some(b"0123456789abcdef0124")));
        assert!(!verify(&k, Some(b"0123")));
        assert!(!verify(&k, None));
    }
}
