//! Update operators, replacement and upsert (owner: update helper).
