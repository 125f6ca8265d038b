//! Server nonces for SCRAM. By default each runtime thread keeps its own ChaCha20 CSPRNG,
//! seeded once from the OS: a handshake makes no syscall for randomness and shares no
//! lock or cache line with other handshakes. Reading /dev/urandom per connection is what
//! a mongos did in a connection-storm outage: on the kernels of the time the reads
//! contended on a kernel lock, and system CPU pegged during churn.
//! `NonceSource::Os` reproduces that behaviour on purpose, for the chaos comparison.

use std::cell::RefCell;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Bytes of randomness in a server nonce (MongoDB uses 24).
pub const NONCE_BYTES: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceSource {
    /// Per-thread user-space CSPRNG (the default).
    User,
    /// The OS (`getrandom`) for every nonce.
    Os,
}

impl NonceSource {
    pub fn parse(s: &str) -> Result<NonceSource, String> {
        match s {
            "user" => Ok(NonceSource::User),
            "os" => Ok(NonceSource::Os),
            other => Err(format!(
                "nonce_source must be \"user\" or \"os\", not \"{other}\""
            )),
        }
    }

    /// A fresh nonce, base64-encoded (SCRAM nonces are printable and exclude ',').
    pub fn nonce(self) -> String {
        let mut bytes = [0u8; NONCE_BYTES];
        self.fill(&mut bytes);
        super::scram::b64(&bytes)
    }

    pub fn fill(self, bytes: &mut [u8]) {
        match self {
            NonceSource::User => THREAD_RNG.with(|r| r.borrow_mut().fill_bytes(bytes)),
            NonceSource::Os => rand::rngs::OsRng.fill_bytes(bytes),
        }
    }
}

thread_local! {
    // Seeded from the OS the first time a thread draws a nonce, never again: ChaCha20
    // is a CSPRNG, so its output stays unpredictable without reseeding.
    static THREAD_RNG: RefCell<ChaCha20Rng> = RefCell::new(ChaCha20Rng::from_entropy());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_differ_and_have_no_commas() {
        for src in [NonceSource::User, NonceSource::Os] {
            let a = src.nonce();
            let b = src.nonce();
            assert_ne!(a, b);
            assert!(!a.contains(','));
            assert_eq!(a.len(), 32);
        }
    }
}
