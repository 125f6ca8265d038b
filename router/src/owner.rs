//! Who a cursor, an operation or a session belongs to: the authenticated user. Cursors,
//! operations and authentication all name it, so it lives apart from each of them.

/// The authenticated user as `(user, db)`; `None` when auth is off or nobody logged in.
pub type Owner = Option<(String, String)>;
