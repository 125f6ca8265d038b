//! `sleep` (MongoDB's test command): holds a read ticket for `millis` without touching
//! data. Tests use it to fill the queue and to show that a waiting operation can be
//! killed; it wakes every 10 ms to check its deadline and kill flag, like any scan, but
//! never yields its ticket (it stands for work that cannot).

use std::time::{Duration, Instant};

use bson::{doc, Document};
use wire::{MongoError, MongoResult};

use super::args::opt_i64;
use crate::node::Ctx;

/// The longest sleep accepted (mongod has no limit; an hour bounds a mistake).
const MAX_MILLIS: i64 = 3_600_000;
const STEP: Duration = Duration::from_millis(10);

pub fn run(ctx: &Ctx, cmd: &Document) -> MongoResult<Document> {
    let millis = match (opt_i64(cmd, "millis")?, opt_i64(cmd, "secs")?) {
        (Some(ms), _) => ms,
        (None, Some(secs)) => secs.saturating_mul(1000),
        (None, None) => 10_000,
    };
    if !(0..=MAX_MILLIS).contains(&millis) {
        return Err(MongoError::new(
            wire::ErrorCode::BadValue,
            format!("sleep: millis must be between 0 and {MAX_MILLIS}"),
        ));
    }
    let until = Instant::now() + Duration::from_millis(millis as u64);
    loop {
        ctx.deadline.check_holding()?;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(doc! {});
        }
        std::thread::sleep(left.min(STEP));
    }
}
