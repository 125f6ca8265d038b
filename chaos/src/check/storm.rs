//! A storm must not avalanche: the router keeps completing handshakes through it (a
//! collapse shows as seconds with none at all), and serves again once it ends.

use serde::Serialize;

/// At least this fraction of the storm's seconds must see successful handshakes.
pub const MIN_SERVED_FRACTION: f64 = 0.5;

#[derive(Debug, Serialize)]
pub struct Report {
    /// Seconds of the storm with at least one successful handshake.
    pub seconds_served: usize,
    pub seconds: usize,
    pub handshakes: u64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.handshakes > 0
            && self.seconds_served as f64 >= MIN_SERVED_FRACTION * self.seconds as f64
    }
}

/// `per_sec`: successful handshakes in each second of the storm.
pub fn check(per_sec: &[u64]) -> Report {
    Report {
        seconds_served: per_sec.iter().filter(|&&n| n > 0).count(),
        seconds: per_sec.len(),
        handshakes: per_sec.iter().sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_avalanche_fails_and_a_dip_does_not() {
        assert!(!check(&[120, 80, 3, 0, 0, 0, 0, 0, 0, 0]).ok());
        assert!(check(&[120, 80, 3, 0, 20, 60, 70, 80, 90, 90]).ok());
        assert!(!check(&[]).ok());
    }
}
