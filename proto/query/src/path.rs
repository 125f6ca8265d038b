//! Dotted-path access into documents (owner: query-core helper).
