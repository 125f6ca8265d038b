//! What routers and shards share about change streams: the `$changeStream` stage's
//! options (`spec`) and resume tokens (`token`).

pub mod spec;
pub mod token;

pub use spec::{check_pipeline, opens_stream, BeforeChange, FullDocument, Scope, Spec, Start};
pub use token::{EventPos, Token};
