//! xorshift64: deterministic, dependency-free pseudo-random numbers for the conformance
//! suite and the benchmarks (not for anything that needs unpredictability).

pub struct Rng(u64);

impl Rng {
    /// `seed` must not be zero (xorshift would then only ever return zero).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
