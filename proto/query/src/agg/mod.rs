//! Aggregation pipeline stages (owner: aggregation helper).
