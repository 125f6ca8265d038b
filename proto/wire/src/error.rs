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
    UnsupportedFormat = 12;
    Unauthorized = 13;
    TypeMismatch = 14;
    Overflow = 15;
    InvalidLength = 16;
    ProtocolError = 17;
    AuthenticationFailed = 18;
    IllegalOperation = 20;
    InvalidBSON = 22;
    LockTimeout = 24;
    AlreadyInitialized = 23;
    NamespaceNotFound = 26;
    IndexNotFound = 27;
    PathNotViable = 28;
    RoleNotFound = 31;
    CannotBackfillArray = 34;
    ConflictingUpdateOperators = 40;
    CursorNotFound = 43;
    LockBusy = 46;
    NoMatchingDocument = 47;
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
    FailedToSatisfyReadPreference = 133;
    ReadConcernMajorityNotAvailableYet = 134;
    ExceededMemoryLimit = 146;
    CommandNotSupportedOnView = 166;
    InvalidPipelineOperator = 168;
    CannotIndexParallelArrays = 171;
    ZoneNotFound = 177;
    RangeOverlapConflict = 178;
    PrimarySteppedDown = 189, retryable;
    NetworkInterfaceExceededTimeLimit = 202;
    QueryFeatureNotAllowed = 224;
    TransactionTooOld = 225;
    NotImplemented = 238;
    SnapshotTooOld = 239;
    ConversionFailure = 241;
    SnapshotUnavailable = 246;
    StaleDbVersion = 249;
    NoSuchTransaction = 251;
    TransactionCommitted = 256;
    TransactionTooLarge = 257;
    InvalidResumeToken = 260;
    TooManyLogicalSessions = 261;
    ExceededTimeLimit = 262, retryable;
    OperationNotSupportedInTransaction = 263;
    PreparedTransactionInProgress = 267;
    ClientDisconnect = 279;
    ChangeStreamFatalError = 280;
    WouldChangeOwningShard = 283;
    ChangeStreamHistoryLost = 286;
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
    MergeStageNoMatchingDocument = 13113;
    StaleConfig = 13388;
    NotPrimaryNoSecondaryOk = 13435, retryable;
    NotPrimaryOrSecondary = 13436, retryable;
    OutOfDiskSpace = 14031;
    SearchNotEnabled = 31082;

    // MongoDB's numbered assertions, by number: codeName `Location<N>`.
    LookupArgumentNotString = 4570, location;
    LetVarsNotObject = 10065, location;
    BufBuilderTooLarge = 13548, location;
    GroupSpecNotObject = 15947, location;
    GroupIdSpecifiedTwice = 15948, location;
    UnknownGroupOperator = 15952, location;
    GroupMissingId = 15955, location;
    SkipNegative = 15956, location;
    LimitNotNumber = 15957, location;
    LimitNotPositive = 15958, location;
    MatchSpecNotObject = 15959, location;
    ProjectSpecNotObject = 15969, location;
    SkipNotNumber = 15972, location;
    SortStageSpecNotObject = 15973, location;
    SortKeyIllegal = 15974, location;
    SortOrderInvalid = 15975, location;
    SortSpecEmpty = 15976, location;
    UnwindSpecInvalid = 15981, location;
    ExpressionNotOneField = 15983, location;
    FieldPathEmptyComponent = 15998, location;
    DateConversionFailed = 16006, location;
    StringConversionFailed = 16007, location;
    ExpressionArgumentCount = 16020, location;
    SubstrBytesStartNotNumeric = 16034, location;
    SubstrBytesLengthNotNumeric = 16035, location;
    ExpressionObjectDollarField = 16404, location;
    FieldPathDollarPrefix = 16410, location;
    ExpressionObjectDottedField = 16412, location;
    AddNotNumericOrDate = 16554, location;
    MultiplyNotNumeric = 16555, location;
    SubtractInvalidTypes = 16556, location;
    DivideNotNumeric = 16609, location;
    ModByZero = 16610, location;
    ModNotNumeric = 16611, location;
    AddMultipleDates = 16612, location;
    ConcatNotString = 16702, location;
    HashedIndexArrayValue = 16766, location;
    AsNotString = 16866, location;
    VariableNameInvalidStart = 16867, location;
    VariableNameInvalidCharacter = 16868, location;
    VariableNameEmpty = 16869, location;
    FieldPathDollarOnly = 16872, location;
    LetNotObject = 16874, location;
    LetUnknownArgument = 16875, location;
    LetMissingVars = 16876, location;
    LetMissingIn = 16877, location;
    MapNotObject = 16878, location;
    MapUnknownArgument = 16879, location;
    MapMissingInput = 16880, location;
    MapMissingIn = 16882, location;
    MapInputNotArray = 16883, location;
    OutSpecInvalid = 16990, location;
    AllElementsTrueNotArray = 17040, location;
    AnyElementTrueNotArray = 17041, location;
    SetIsSubsetSecondNotArray = 17042, location;
    SetUnionNotArray = 17043, location;
    SetEqualsNotArray = 17044, location;
    SetIsSubsetFirstNotArray = 17046, location;
    SetIntersectionNotArray = 17047, location;
    SetDifferenceFirstNotArray = 17048, location;
    SetDifferenceSecondNotArray = 17049, location;
    RedactInvalidResult = 17053, location;
    CondMissingIf = 17080, location;
    CondMissingThen = 17081, location;
    CondMissingElse = 17082, location;
    CondUnknownArgument = 17083, location;
    SizeNotArray = 17124, location;
    UndefinedVariable = 17276, location;
    DateToStringFormatNotString = 18533, location;
    DateToStringUnknownArgument = 18534, location;
    DateFormatTrailingPercent = 18535, location;
    DateFormatInvalidCharacter = 18536, location;
    DateToStringYearOutOfRange = 18537, location;
    DateToStringMissingDate = 18628, location;
    DateToStringNotObject = 18629, location;
    FilterNotObject = 28646, location;
    FilterUnknownArgument = 28647, location;
    FilterMissingInput = 28648, location;
    FilterMissingCond = 28650, location;
    FilterInputNotArray = 28651, location;
    SubstrBytesStartMidCharacter = 28656, location;
    SubstrBytesEndMidCharacter = 28657, location;
    ConcatArraysNotArray = 28664, location;
    AbsOfLongMin = 28680, location;
    ArrayElemAtNotArray = 28689, location;
    ArrayElemAtIndexNotNumeric = 28690, location;
    ArrayElemAtIndexNotInt32 = 28691, location;
    SqrtNegative = 28714, location;
    SliceFirstNotArray = 28724, location;
    SliceSecondNotNumeric = 28725, location;
    SliceThirdNotNumeric = 28726, location;
    SliceThirdNotPositive = 28729, location;
    SampleNotObject = 28745, location;
    SampleSizeNotNumber = 28746, location;
    SampleSizeNegative = 28747, location;
    SampleUnknownOption = 28748, location;
    SampleMissingSize = 28749, location;
    LogArgumentNotNumeric = 28756, location;
    LogBaseNotNumeric = 28757, location;
    LogArgumentNotPositive = 28758, location;
    LogBaseInvalid = 28759, location;
    Log10NotPositive = 28761, location;
    PowBaseNotNumeric = 28762, location;
    PowExponentNotNumeric = 28763, location;
    PowZeroToNegative = 28764, location;
    MathNotNumeric = 28765, location;
    LnNotPositive = 28766, location;
    UnwindPathNotString = 28808, location;
    UnwindPreserveNotBool = 28809, location;
    UnwindIndexFieldInvalid = 28810, location;
    UnwindUnknownOption = 28811, location;
    UnwindMissingPath = 28812, location;
    UnwindPathNotDollarPrefixed = 28818, location;
    UnwindIndexFieldDollarPrefixed = 28822, location;
    UnsetSpecInvalid = 31002, location;
    RegexOperatorMissingInput = 31022, location;
    RegexOperatorMissingRegex = 31023, location;
    RegexOperatorUnknownArgument = 31024, location;
    DatePartOutOfRange = 31034, location;
    UnsetSpecEmpty = 31119, location;
    UnsetSpecNotStrings = 31120, location;
    ProjectionPathCollision = 31249, location;
    ProjectionPathPrefixCollision = 31250, location;
    ProjectionExpressionInExclusion = 31252, location;
    ProjectionInclusionInExclusion = 31253, location;
    ProjectionExclusionInInclusion = 31254, location;
    ProjectionElemMatchNested = 31275, location;
    ProjectionPositionalTwice = 31276, location;
    BsonSizeNotDocument = 31393, location;
    ProjectionPositionalMidPath = 31394, location;
    ProjectionPositionalNotInclusion = 31395, location;
    MergeOnDuplicateField = 31465, location;
    ReverseArrayNotArray = 34435, location;
    RangeStartNotNumeric = 34443, location;
    RangeStartNotInt32 = 34444, location;
    RangeEndNotNumeric = 34445, location;
    RangeEndNotInt32 = 34446, location;
    RangeStepNotNumeric = 34447, location;
    RangeStepNotInt32 = 34448, location;
    RangeStepZero = 34449, location;
    SubstrCPStartNotNumeric = 34450, location;
    SubstrCPStartNotInt32 = 34451, location;
    SubstrCPLengthNotNumeric = 34452, location;
    SubstrCPLengthNotInt32 = 34453, location;
    SubstrCPLengthNegative = 34454, location;
    SubstrCPStartNegative = 34455, location;
    ZipNotObject = 34460, location;
    ZipInputsNotArray = 34461, location;
    ZipDefaultsNotArray = 34462, location;
    ZipUseLongestLengthNotBool = 34463, location;
    ZipUnknownArgument = 34464, location;
    ZipMissingInputs = 34465, location;
    ZipDefaultsWithoutUseLongestLength = 34466, location;
    ZipDefaultsLengthMismatch = 34467, location;
    ZipInputNotArray = 34468, location;
    ConvertMissingArgument = 34469, location;
    StrLenCPNotString = 34471, location;
    StrLenBytesNotString = 34473, location;
    SwitchNotObject = 40060, location;
    SwitchBranchesNotArray = 40061, location;
    SwitchBranchNotObject = 40062, location;
    SwitchBranchUnknownArgument = 40063, location;
    SwitchBranchMissingCase = 40064, location;
    SwitchBranchMissingThen = 40065, location;
    SwitchNoMatchingBranch = 40066, location;
    SwitchUnknownArgument = 40067, location;
    SwitchNoBranches = 40068, location;
    ReduceNotObject = 40075, location;
    ReduceUnknownArgument = 40076, location;
    ReduceMissingInput = 40077, location;
    ReduceMissingInitialValue = 40078, location;
    ReduceMissingIn = 40079, location;
    ReduceInputNotArray = 40080, location;
    InNotArray = 40081, location;
    SplitInputNotString = 40085, location;
    SplitSeparatorNotString = 40086, location;
    SplitSeparatorEmpty = 40087, location;
    IndexOfArrayNotArray = 40090, location;
    IndexOfStringNotString = 40091, location;
    IndexOfSubstringNotString = 40092, location;
    IndexOfStartNotIntegral = 40096, location;
    IndexOfStartNegative = 40097, location;
    GraphLookupMaxDepthNotNumeric = 40100, location;
    GraphLookupMaxDepthNegative = 40101, location;
    GraphLookupArgumentNotString = 40103, location;
    GraphLookupUnknownArgument = 40104, location;
    GraphLookupMissingArgument = 40105, location;
    SortByCountInvalid = 40148, location;
    CountFieldNotString = 40156, location;
    CountFieldEmpty = 40157, location;
    CountFieldDollarPrefixed = 40158, location;
    CountFieldNullByte = 40159, location;
    CountFieldDotted = 40160, location;
    FacetSpecInvalid = 40169, location;
    FacetArgumentNotArray = 40170, location;
    FacetStageNotObject = 40171, location;
    UnionWithStageNotObject = 40172, location;
    GraphLookupRestrictNotObject = 40185, location;
    BucketTooFewBoundaries = 40192, location;
    BucketBoundariesMixedTypes = 40193, location;
    BucketBoundariesUnsorted = 40194, location;
    BucketOutputNotObject = 40196, location;
    BucketUnknownOption = 40197, location;
    BucketMissingArgument = 40198, location;
    BucketDefaultInRange = 40199, location;
    BucketBoundariesNotArray = 40200, location;
    BucketNotObject = 40201, location;
    BucketGroupByInvalid = 40202, location;
    ReplaceRootNotObject = 40228, location;
    AccumulatorNotObject = 40234, location;
    GroupFieldDotted = 40235, location;
    GroupFieldOperator = 40236, location;
    AccumulatorNotUnary = 40237, location;
    AccumulatorNotSingle = 40238, location;
    BucketAutoNotObject = 40240, location;
    BucketAutoBucketsNotNumeric = 40241, location;
    BucketAutoBucketsNotPositive = 40243, location;
    BucketAutoUnknownOption = 40245, location;
    BucketAutoMissingArgument = 40246, location;
    StageSpecNotObject = 40272, location;
    CountAccumulatorTakesArguments = 40273, location;
    StageNotOneField = 40323, location;
    UnknownStage = 40324, location;
    GraphLookupNotObject = 40327, location;
    FieldPathEmpty = 40352, location;
    ArrayToObjectNotArray = 40386, location;
    ObjectToArrayNotDocument = 40390, location;
    ArrayToObjectKeyCount = 40392, location;
    ArrayToObjectMissingKOrV = 40393, location;
    ArrayToObjectKNotString = 40394, location;
    ArrayToObjectPairKeyNotString = 40395, location;
    ArrayToObjectMixedFormats = 40396, location;
    ArrayToObjectPairSize = 40397, location;
    ArrayToObjectInvalidElement = 40398, location;
    MergeObjectsNotObject = 40400, location;
    // MongoDB's newer error_codes.yml names 40414 and 40415 (IDLFailedToParse,
    // IDLUnknownField); Bulwark answers as MongoDB 7.0, which reports them as Location codes.
    RequiredFieldMissing = 40414, location;
    UnknownField = 40415, location;
    TimezoneUnknown = 40485, location;
    DateFromPartsMixesIsoDates = 40489, location;
    DatePartNotInteger = 40515, location;
    DateFromPartsMissingYear = 40516, location;
    TimezoneNotString = 40517, location;
    DateOperatorUnknownArgument = 40518, location;
    Iso8601NotBool = 40521, location;
    DateFromPartsYearOutOfRange = 40523, location;
    DateOperatorMissingArgument = 40539, location;
    DateFromStringNotObject = 40540, location;
    DateFromStringUnknownArgument = 40541, location;
    DateFromStringMissingDateString = 40542, location;
    OpMsgMissingDb = 40571, location;
    ChangeStreamUnsupportedTopology = 40573, location;
    NotAllowedInFacet = 40600, location;
    OutputStageNotLast = 40601, location;
    DocumentsNotFirst = 40602, location;
    RetryableWriteOtherNamespace = 40606, location;
    ChangeStreamStartBothTokenAndTime = 40674, location;
    DateFromStringFormatNotString = 40684, location;
    TrimUnknownArgument = 50694, location;
    TrimMissingInput = 50695, location;
    TrimNotObject = 50696, location;
    TrimInputNotString = 50699, location;
    TrimCharsNotString = 50700, location;
    SubstrBytesStartNegative = 50752, location;
    ChangeStreamBothResumeAndStartAfter = 50865, location;
    RoleAlreadyExists = 51002, location;
    UserAlreadyExists = 51003, location;
    NotAllowedInLookup = 51047, location;
    RegexOptionsTwice = 51075, location;
    RoundDecimalConversion = 51080, location;
    RoundNotNumeric = 51081, location;
    RoundPrecisionOutOfRange = 51083, location;
    RegexInvalid = 51091, location;
    RegexOperatorNotObject = 51103, location;
    RegexOperatorInputNotString = 51104, location;
    RegexOperatorRegexInvalidType = 51105, location;
    RegexOperatorOptionsNotString = 51106, location;
    RegexOperatorOptionsTwice = 51107, location;
    RegexInvalidFlag = 51108, location;
    RegexOperatorInvalidRegex = 51111, location;
    MergeOnFieldMissing = 51132, location;
    MergeOnNotStrings = 51134, location;
    MergeIntoInvalid = 51178, location;
    MergeSpecInvalid = 51182, location;
    MergeOnInvalid = 51186, location;
    MergeOnEmpty = 51187, location;
    MergeLetWithoutPipeline = 51199, location;
    PositionalProjectionNoMatch = 51246, location;
    ProjectionEmptySubProjection = 51270, location;
    ProjectionEmpty = 51272, location;
    BinarySizeInvalidType = 51276, location;
    ReplaceReplacementNotString = 51744, location;
    ReplaceFindNotString = 51745, location;
    ReplaceInputNotString = 51746, location;
    ReplaceMissingArgument = 51748, location;
    ReplaceUnknownArgument = 51750, location;
    ReplaceNotObject = 51751, location;
    FilterLimitNotPositive = 327391, location;
    FilterLimitNotInt32 = 327392, location;
    SortArrayNotObject = 2942500, location;
    SortArrayUnknownArgument = 2942501, location;
    SortArrayMissingArgument = 2942502, location;
    SortArraySortByInvalid = 2942503, location;
    SortArrayInputNotArray = 2942504, location;
    GetFieldUnknownArgument = 3041701, location;
    GetFieldMissingField = 3041702, location;
    GetFieldFieldNotString = 3041704, location;
    SetFieldNotObject = 4161100, location;
    SetFieldUnknownArgument = 4161101, location;
    SetFieldMissingArgument = 4161102, location;
    SetFieldInputNotObject = 4161105, location;
    SetFieldFieldNotString = 4161106, location;
    ArrayToObjectKeyNullByte = 4940400, location;
    DateDiffOverflow = 5166308, location;
    DateAddAmountNotIntegral = 5166405, location;
    DateAddOverflow = 5166406, location;
    DateUnitNotString = 5439013, location;
    DateUnitUnknown = 5439014, location;
    StartOfWeekNotString = 5439015, location;
    StartOfWeekUnknown = 5439016, location;
    DateTruncBinSizeInvalid = 5439017, location;
    OpQueryUnsupported = 5739101, location;
    ArgumentsNotObject = 5787801, location;
    NAccumulatorUnknownArgument = 5787901, location;
    NNotIntegral = 5787902, location;
    NAccumulatorMissingN = 5787906, location;
    NAccumulatorMissingInput = 5787907, location;
    NNotPositive = 5787908, location;
    TopBottomNotObject = 5788001, location;
    TopBottomUnknownArgument = 5788002, location;
    TopBottomMissingN = 5788003, location;
    TopBottomMissingOutput = 5788004, location;
    TopBottomMissingSortBy = 5788005, location;
    NInputNotArray = 5788200, location;
    DocumentsNotArray = 5858203, location;
    DateSubtractAmountInvalid = 6045000, location;
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

    /// An error with any code, named as MongoDB names it: what another node reported. Bulwark's
    /// own errors name their code: [`MongoError::new`].
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
        assert_eq!(e.code, 40414);
        assert_eq!(e.code_name, "Location40414");
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
