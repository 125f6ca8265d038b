//! The one error type every Bulwark crate uses to report a MongoDB error to a client.
//!
//! A `MongoError` carries the numeric code and codeName a driver switches on, a human
//! message, and optional extra fields (for example `keyValue` on E11000). Converting it
//! into the reply document happens in one place: [`MongoError::to_document`].

use std::borrow::Cow;

use bson::{doc, Document};

/// Generates [`ErrorCode`] from one table. Each row is a variant, its number and at most
/// one label:
///
/// - no label: one of MongoDB's named codes (`src/mongo/base/error_codes.yml`); the
///   variant's name is the `codeName` drivers see.
/// - `retryable`: a named code after which a retryable write may be sent again
///   (MongoDB's list: the write either did not happen or, with the same `txnNumber`,
///   will not happen twice).
/// - `location`: one of MongoDB's numbered assertions, which it reports as
///   `codeName: "Location<N>"`; the variant's name is for Rust code only.
macro_rules! error_codes {
    ($($name:ident = $code:literal $(, $label:ident)?;)*) => {
        /// MongoDB error codes used by Bulwark: named codes (values from mongo
        /// `src/mongo/base/error_codes.yml`) and numbered assertions (`Location<N>`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum ErrorCode {
            $($name = $code,)*
        }

        impl ErrorCode {
            /// Every code, in the table's order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The `codeName` MongoDB gives this code: its name, or `Location<N>` for a
            /// numbered assertion.
            pub fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => error_codes!(@name $name $code $($label)?),)*
                }
            }

            /// The code with this number, when Bulwark knows it.
            pub fn from_code(code: i32) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$name),)*
                    _ => None,
                }
            }

            /// Whether a retryable write that failed with this code may be sent again
            /// (`RetryableWriteError`).
            pub fn is_retryable_write(self) -> bool {
                match self {
                    $(ErrorCode::$name => error_codes!(@retryable $($label)?),)*
                }
            }

            /// Whether this is one of MongoDB's numbered assertions (`Location<N>`)
            /// rather than a named code.
            pub fn is_location(self) -> bool {
                match self {
                    $(ErrorCode::$name => error_codes!(@location $($label)?),)*
                }
            }
        }
    };
    (@name $name:ident $code:literal location) => {
        concat!("Location", $code)
    };
    (@name $name:ident $code:literal $(retryable)?) => {
        stringify!($name)
    };
    (@retryable retryable) => {
        true
    };
    (@retryable $(location)?) => {
        false
    };
    (@location location) => {
        true
    };
    (@location $(retryable)?) => {
        false
    };
}

error_codes! {
    InternalError = 1;
    BadValue = 2;
    NoSuchKey = 4;
    GraphContainsCycle = 5;
    HostUnreachable = 6, retryable;
    HostNotFound = 7, retryable;
    UnknownError = 8;
    FailedToParse = 9;
    UserNotFound = 11;
    Unauthorized = 13;
    TypeMismatch = 14;
    Overflow = 15;
    InvalidLength = 16;
    ProtocolError = 17;
    AuthenticationFailed = 18;
    IllegalOperation = 20;
    InvalidBSON = 22;
    AlreadyInitialized = 23;
    NamespaceNotFound = 26;
    IndexNotFound = 27;
    PathNotViable = 28;
    RoleNotFound = 31;
    ConflictingUpdateOperators = 40;
    CursorNotFound = 43;
    LockBusy = 46;
    NamespaceExists = 48;
    MaxTimeMSExpired = 50;
    DollarPrefixedFieldName = 52;
    InvalidIdField = 53;
    NotSingleValueField = 54;
    EmptyFieldName = 56;
    CommandNotFound = 59;
    ShardKeyNotFound = 61;
    WriteConcernFailed = 64;
    ImmutableField = 66;
    CannotCreateIndex = 67;
    IndexAlreadyExists = 68;
    ShardNotFound = 70;
    InvalidOptions = 72;
    InvalidNamespace = 73;
    NoReplicationEnabled = 76;
    UnknownReplWriteConcern = 79;
    IndexOptionsConflict = 85;
    IndexKeySpecsConflict = 86;
    NetworkTimeout = 89, retryable;
    ShutdownInProgress = 91, retryable;
    NotSecondary = 95;
    OperationFailed = 96;
    UnsatisfiableWriteConcern = 100;
    WriteConflict = 112;
    CommandNotSupported = 115;
    ConflictingOperationInProgress = 117;
    UnsupportedFormat = 140;
    ExceededMemoryLimit = 146;
    InvalidPipelineOperator = 168;
    ZoneNotFound = 177;
    RangeOverlapConflict = 178;
    PrimarySteppedDown = 189, retryable;
    QueryFeatureNotAllowed = 224;
    TransactionTooOld = 225;
    NotImplemented = 238;
    StaleDbVersion = 249;
    TooManyLogicalSessions = 261;
    ExceededTimeLimit = 262, retryable;
    ClientDisconnect = 279;
    WouldChangeOwningShard = 283;
    QueryExceededMemoryLimitNoDiskUseAllowed = 292;
    APIStrictError = 323;
    MechanismUnavailable = 334;
    IngressRequestRateLimitExceeded = 462;
    SocketException = 9001, retryable;
    NotWritablePrimary = 10107, retryable;
    BSONObjectTooLarge = 10334;
    DuplicateKey = 11000;
    InterruptedAtShutdown = 11600, retryable;
    Interrupted = 11601;
    InterruptedDueToReplStateChange = 11602, retryable;
    StaleConfig = 13388;
    NotPrimaryNoSecondaryOk = 13435, retryable;
    NotPrimaryOrSecondary = 13436, retryable;
    OutOfDiskSpace = 14031;
    SearchNotEnabled = 31082;

    // MongoDB's numbered assertions, by number: codeName `Location<N>`.
    FieldPathEmptyComponent = 15998, location;
    FieldPathDollarPrefix = 16410, location;
    FieldPathEmpty = 40352, location;
    // MongoDB's newer error_codes.yml names 40414 and 40415 (IDLFailedToParse,
    // IDLUnknownField); Bulwark answers as MongoDB 7.0, which reports them as Location codes.
    RequiredFieldMissing = 40414, location;
    UnknownField = 40415, location;
}

/// The `codeName` of any code: MongoDB's name when Bulwark knows the code, otherwise
/// `Location<code>` as MongoDB names its unnamed assertion codes.
pub fn code_name(code: i32) -> String {
    ErrorCode::from_code(code).map_or_else(|| format!("Location{code}"), |c| c.name().to_string())
}

/// The labels of an overload refusal ([`MongoError::overloaded`]): drivers that follow
/// the client-backpressure specification retry it after a backoff.
pub const OVERLOADED_LABELS: [&str; 2] = ["SystemOverloadedError", "RetryableError"];

/// An error reported to a MongoDB client as `{ok: 0, errmsg, code, codeName, ...extra}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code_name} ({code}): {message}")]
pub struct MongoError {
    pub code: i32,
    pub code_name: Cow<'static, str>,
    pub message: String,
    /// Extra top-level reply fields, e.g. `keyPattern`/`keyValue` for a duplicate key.
    /// Boxed so that `Result<T, MongoError>` stays small on every return path.
    pub extra: Option<Box<Document>>,
}

impl MongoError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        MongoError {
            code: code as i32,
            code_name: Cow::Borrowed(code.name()),
            message: message.into(),
            extra: None,
        }
    }

    /// An error whose code has no name in [`ErrorCode`] (MongoDB's numbered "LocationNNNN" asserts).
    pub fn location(code: i32, message: impl Into<String>) -> Self {
        MongoError {
            code,
            code_name: Cow::Owned(format!("Location{code}")),
            message: message.into(),
            extra: None,
        }
    }

    /// Work refused because the server is overloaded, before anything was started: what
    /// MongoDB 8.2's ingress request rate limiter answers (code 462 with the labels of
    /// the client-backpressure specification). Drivers that know the labels retry after
    /// an exponential backoff; older ones do not retry at once, as they would a
    /// retryable-read code (262 among them), which doubles what every refusal costs an
    /// overloaded server.
    pub fn overloaded(message: impl Into<String>) -> Self {
        MongoError::new(ErrorCode::IngressRequestRateLimitExceeded, message).with_extra(doc! {
            "errorLabels": OVERLOADED_LABELS.to_vec(),
        })
    }

    /// An error with any code, named as MongoDB names it (what another node reported).
    pub fn coded(code: i32, message: impl Into<String>) -> Self {
        MongoError {
            code,
            code_name: Cow::Owned(code_name(code)),
            message: message.into(),
            extra: None,
        }
    }

    pub fn with_extra(mut self, extra: Document) -> Self {
        self.extra = Some(Box::new(extra));
        self
    }

    pub fn bad_value(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadValue, message)
    }

    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeMismatch, message)
    }

    pub fn failed_to_parse(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::FailedToParse, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, message)
    }

    /// The command-reply form of this error.
    pub fn to_document(&self) -> Document {
        let mut d = doc! { "ok": 0.0, "errmsg": self.message.clone(), "code": self.code, "codeName": self.code_name.as_ref() };
        if let Some(extra) = &self.extra {
            for (k, v) in extra.iter() {
                d.insert(k.clone(), v.clone());
            }
        }
        d
    }

    /// The form used inside `writeErrors` entries (`index` is added by the caller).
    pub fn to_write_error(&self, index: usize) -> Document {
        let mut d =
            doc! { "index": index as i32, "code": self.code, "errmsg": self.message.clone() };
        if let Some(extra) = &self.extra {
            for (k, v) in extra.iter() {
                d.insert(k.clone(), v.clone());
            }
        }
        d
    }
}

pub type MongoResult<T> = Result<T, MongoError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_found_by_its_number_and_named_once() {
        let mut names = std::collections::HashSet::new();
        let mut numbers = std::collections::HashSet::new();
        for &c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c as i32), Some(c));
            assert!(numbers.insert(c as i32), "{} twice", c as i32);
            assert!(names.insert(c.name()), "{} twice", c.name());
            assert_eq!(code_name(c as i32), c.name());
        }
        assert_eq!(code_name(11000), "DuplicateKey");
        assert_eq!(code_name(4242), "Location4242");
        assert_eq!(ErrorCode::from_code(4242), None);
    }

    #[test]
    fn code_names_are_mongodb_s() {
        for &c in ErrorCode::ALL {
            let variant = format!("{c:?}");
            if c.is_location() {
                // A numbered assertion: MongoDB's codeName, whatever the Rust name.
                assert_eq!(c.name(), format!("Location{}", c as i32), "{variant}");
                assert!(!c.is_retryable_write(), "{variant}");
            } else {
                // A named code: the variant is MongoDB's name.
                assert_eq!(c.name(), variant);
                assert!(!variant.starts_with("Location"), "{variant}");
            }
        }
        assert_eq!(ErrorCode::FieldPathEmpty.name(), "Location40352");
        assert_eq!(ErrorCode::BadValue.name(), "BadValue");
        let e = MongoError::new(ErrorCode::RequiredFieldMissing, "m");
        assert_eq!((e.code, e.code_name.as_ref()), (40414, "Location40414"));
    }

    #[test]
    fn retryable_writes_follow_mongodb_s_list() {
        let retryable: Vec<i32> = ErrorCode::ALL
            .iter()
            .filter(|c| c.is_retryable_write())
            .map(|&c| c as i32)
            .collect();
        let expected = [
            6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
        ];
        assert_eq!(retryable, expected);
    }
}
