//! The process's recent log lines, for `getLog`: a `tracing` layer (`Recorder`, added
//! where the process sets up its logging) keeps the last `KEEP` events as MongoDB-style
//! JSON lines, and the warnings logged before the first router listens as the startup
//! warnings. A process that never adds the layer answers with empty logs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The most lines `getLog: "global"` answers with, as in MongoDB.
pub const KEEP: usize = 1024;
/// The most startup warnings kept.
const STARTUP_KEEP: usize = 128;

#[derive(Default)]
struct LogBuffer {
    recent: Mutex<VecDeque<String>>,
    written: AtomicU64,
    startup: Mutex<Vec<String>>,
    started: AtomicBool,
}

static BUFFER: OnceLock<LogBuffer> = OnceLock::new();

fn buffer() -> &'static LogBuffer {
    BUFFER.get_or_init(LogBuffer::default)
}

impl LogBuffer {
    fn record(&self, line: String, warning: bool) {
        self.written.fetch_add(1, Ordering::Relaxed);
        if warning && !self.started.load(Ordering::Relaxed) {
            let mut startup = self.startup.lock();
            if startup.len() < STARTUP_KEEP {
                startup.push(line.clone());
            }
        }
        let mut recent = self.recent.lock();
        if recent.len() == KEEP {
            recent.pop_front();
        }
        recent.push_back(line);
    }
}

/// Ends the startup: later warnings are not startup warnings.
pub fn started() {
    buffer().started.store(true, Ordering::Relaxed);
}

/// The lines written in all, and the last `KEEP` of them, oldest first.
pub fn global() -> (u64, Vec<String>) {
    let b = buffer();
    let lines = b.recent.lock().iter().cloned().collect();
    (b.written.load(Ordering::Relaxed), lines)
}

/// The warnings logged before the first router listened.
pub fn startup_warnings() -> Vec<String> {
    buffer().startup.lock().clone()
}

/// The layer that records every event the process logs.
pub struct Recorder;

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = doc! {
            "t": {"$date": chrono_like_now()},
            "s": severity(*meta.level()),
            "c": meta.target(),
            "msg": fields.message,
            "attr": fields.attr,
        };
        let json = Bson::Document(line).into_relaxed_extjson().to_string();
        // Levels order from the most severe: WARN and ERROR are at or below WARN.
        buffer().record(json, *meta.level() <= Level::WARN);
    }
}

/// MongoDB's severity letters.
fn severity(level: Level) -> &'static str {
    match level {
        Level::ERROR => "E",
        Level::WARN => "W",
        Level::INFO => "I",
        _ => "D1",
    }
}

/// Now as ISO 8601 in UTC with milliseconds, as MongoDB writes `t`.
fn chrono_like_now() -> String {
    bson::DateTime::now()
        .try_to_rfc3339_string()
        .unwrap_or_default()
}

/// An event's message and its other fields.
#[derive(Default)]
struct Fields {
    message: String,
    attr: Document,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Bson::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Bson::Int64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Bson::Int64(i64::try_from(value).unwrap_or(i64::MAX)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Bson::Boolean(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Bson::String(format!("{value:?}")));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: Bson) {
        match (field.name(), value) {
            ("message", Bson::String(s)) => self.message = s,
            (name, value) => {
                self.attr.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn events_become_json_lines_and_early_warnings_startup_warnings() {
        let subscriber = tracing_subscriber::registry().with(Recorder);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(port = 27017u64, "an early warning");
            started();
            tracing::info!(user = "alice", "a later line");
            tracing::warn!("a later warning");
        });
        let (written, lines) = global();
        assert!(written >= 3 && lines.len() >= 3, "{lines:?}");
        let line = lines.iter().find(|l| l.contains("a later line")).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(parsed["s"], "I");
        assert_eq!(parsed["msg"], "a later line");
        assert_eq!(parsed["attr"]["user"], "alice");
        let early = startup_warnings();
        assert!(
            early.iter().any(|l| l.contains("an early warning")),
            "{early:?}"
        );
        assert!(
            !early.iter().any(|l| l.contains("a later warning")),
            "{early:?}"
        );
    }
}
