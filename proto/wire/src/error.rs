//! The one error type every Bulwark crate uses to report a MongoDB error to a client.
//!
//! A `MongoError` carries the numeric code and codeName a driver switches on, a human
//! message, and optional extra fields (for example `keyValue` on E11000). Converting it
//! into the reply document happens in one place: [`MongoError::to_document`].

use std::borrow::Cow;

use bson::{doc, Document};

/// MongoDB error codes used by Bulwark (values from mongo `src/mongo/base/error_codes.yml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    InternalError = 1,
    BadValue = 2,
    GraphContainsCycle = 5,
    NoSuchKey = 4,
    UnknownError = 8,
    FailedToParse = 9,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    ProtocolError = 17,
    AuthenticationFailed = 18,
    IllegalOperation = 20,
    InvalidBSON = 22,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    NamespaceExists = 48,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    CommandNotFound = 59,
    ImmutableField = 66,
    CannotCreateIndex = 67,
    IndexAlreadyExists = 68,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    OperationFailed = 96,
    UnsatisfiableWriteConcern = 100,
    ExceededMemoryLimit = 146,
    InvalidPipelineOperator = 168,
    CommandNotSupported = 115,
    NotWritablePrimary = 10107,
    NotImplemented = 238,
    QueryFeatureNotAllowed = 224,
    UnsupportedFormat = 140,
    TransactionTooOld = 225,
    TooManyLogicalSessions = 261,
    APIStrictError = 323,
    Location40352 = 40352,
    Location40414 = 40414,
    Location40415 = 40415,
    Location15998 = 15998,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    Location16410 = 16410,
    SearchNotEnabled = 31082,
    EmptyFieldName = 56,
    ShutdownInProgress = 91,
    NotSecondary = 95,
    NetworkTimeout = 89,
    HostUnreachable = 6,
    WriteConcernFailed = 64,
    NoReplicationEnabled = 76,
    Interrupted = 11601,
    ClientDisconnect = 279,
    InterruptedAtShutdown = 11600,
    InterruptedDueToReplStateChange = 11602,
    NotPrimaryNoSecondaryOk = 13435,
    NotPrimaryOrSecondary = 13436,
    ExceededTimeLimit = 262,
    IngressRequestRateLimitExceeded = 462,
    UnknownReplWriteConcern = 79,
    UserNotFound = 11,
    RoleNotFound = 31,
    MechanismUnavailable = 334,
    AlreadyInitialized = 23,
    ShardKeyNotFound = 61,
    ShardNotFound = 70,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    ZoneNotFound = 177,
    RangeOverlapConflict = 178,
    StaleConfig = 13388,
    ConflictingOperationInProgress = 117,
    LockBusy = 46,
    StaleDbVersion = 249,
    WouldChangeOwningShard = 283,
    WriteConflict = 112,
    OutOfDiskSpace = 14031,
}

impl ErrorCode {
    pub fn name(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InternalError => "InternalError",
            BadValue => "BadValue",
            NoSuchKey => "NoSuchKey",
            UnknownError => "UnknownError",
            FailedToParse => "FailedToParse",
            Unauthorized => "Unauthorized",
            TypeMismatch => "TypeMismatch",
            Overflow => "Overflow",
            InvalidLength => "InvalidLength",
            ProtocolError => "ProtocolError",
            AuthenticationFailed => "AuthenticationFailed",
            IllegalOperation => "IllegalOperation",
            InvalidBSON => "InvalidBSON",
            NamespaceNotFound => "NamespaceNotFound",
            IndexNotFound => "IndexNotFound",
            PathNotViable => "PathNotViable",
            ConflictingUpdateOperators => "ConflictingUpdateOperators",
            CursorNotFound => "CursorNotFound",
            NamespaceExists => "NamespaceExists",
            MaxTimeMSExpired => "MaxTimeMSExpired",
            DollarPrefixedFieldName => "DollarPrefixedFieldName",
            InvalidIdField => "InvalidIdField",
            NotSingleValueField => "NotSingleValueField",
            CommandNotFound => "CommandNotFound",
            ImmutableField => "ImmutableField",
            CannotCreateIndex => "CannotCreateIndex",
            IndexAlreadyExists => "IndexAlreadyExists",
            InvalidOptions => "InvalidOptions",
            InvalidNamespace => "InvalidNamespace",
            IndexOptionsConflict => "IndexOptionsConflict",
            IndexKeySpecsConflict => "IndexKeySpecsConflict",
            OperationFailed => "OperationFailed",
            UnsatisfiableWriteConcern => "UnsatisfiableWriteConcern",
            ExceededMemoryLimit => "ExceededMemoryLimit",
            InvalidPipelineOperator => "InvalidPipelineOperator",
            CommandNotSupported => "CommandNotSupported",
            NotWritablePrimary => "NotWritablePrimary",
            NotImplemented => "NotImplemented",
            QueryFeatureNotAllowed => "QueryFeatureNotAllowed",
            APIStrictError => "APIStrictError",
            Location40352 => "Location40352",
            Location40414 => "Location40414",
            Location40415 => "Location40415",
            Location15998 => "Location15998",
            BSONObjectTooLarge => "BSONObjectTooLarge",
            DuplicateKey => "DuplicateKey",
            Location16410 => "Location16410",
            SearchNotEnabled => "SearchNotEnabled",
            EmptyFieldName => "EmptyFieldName",
            ShutdownInProgress => "ShutdownInProgress",
            NotSecondary => "NotSecondary",
            NetworkTimeout => "NetworkTimeout",
            HostUnreachable => "HostUnreachable",
            WriteConcernFailed => "WriteConcernFailed",
            NoReplicationEnabled => "NoReplicationEnabled",
            Interrupted => "Interrupted",
            ClientDisconnect => "ClientDisconnect",
            InterruptedAtShutdown => "InterruptedAtShutdown",
            InterruptedDueToReplStateChange => "InterruptedDueToReplStateChange",
            NotPrimaryNoSecondaryOk => "NotPrimaryNoSecondaryOk",
            NotPrimaryOrSecondary => "NotPrimaryOrSecondary",
            ExceededTimeLimit => "ExceededTimeLimit",
            IngressRequestRateLimitExceeded => "IngressRequestRateLimitExceeded",
            UnknownReplWriteConcern => "UnknownReplWriteConcern",
            UserNotFound => "UserNotFound",
            RoleNotFound => "RoleNotFound",
            GraphContainsCycle => "GraphContainsCycle",
            UnsupportedFormat => "UnsupportedFormat",
            TransactionTooOld => "TransactionTooOld",
            TooManyLogicalSessions => "TooManyLogicalSessions",
            MechanismUnavailable => "MechanismUnavailable",
            AlreadyInitialized => "AlreadyInitialized",
            ShardKeyNotFound => "ShardKeyNotFound",
            ShardNotFound => "ShardNotFound",
            QueryExceededMemoryLimitNoDiskUseAllowed => "QueryExceededMemoryLimitNoDiskUseAllowed",
            ZoneNotFound => "ZoneNotFound",
            RangeOverlapConflict => "RangeOverlapConflict",
            StaleConfig => "StaleConfig",
            ConflictingOperationInProgress => "ConflictingOperationInProgress",
            LockBusy => "LockBusy",
            StaleDbVersion => "StaleDbVersion",
            WouldChangeOwningShard => "WouldChangeOwningShard",
            WriteConflict => "WriteConflict",
            OutOfDiskSpace => "OutOfDiskSpace",
        }
    }
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
