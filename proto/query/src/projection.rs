//! find() projections (owner: query-core helper).
