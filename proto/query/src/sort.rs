//! Sort specifications and document comparison (owner: query-core helper).
