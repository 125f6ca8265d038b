//! Thin safe wrappers over `wiredtiger-sys`. All `unsafe` of the crate lives here.
//!
//! The wrappers are one-to-one with WiredTiger calls (no extra work), so `rawbench` can use
//! them as the baseline. The ownership rules WiredTiger imposes are:
//!
//! * A [`Connection`] is thread-safe; it must outlive every session opened from it.
//! * A [`Session`] (and its cursors) must only be used by one thread at a time; it must
//!   outlive its cursors. The owners in `wt/mod.rs` guarantee both orders: cursors are
//!   struct fields declared before their session, and every session is closed before
//!   the connection (see `Inner::drop`).
//! * Key and value buffers handed to `set_key`/`set_value` are *not* copied by WiredTiger;
//!   they must stay alive until the operation using them returns. So every wrapper that
//!   sets a key takes it as a slice for the duration of the one call that uses it.
//! * Data returned by `get_key`/`get_value` is only valid until the next cursor operation;
//!   the wrappers return slices borrowing the cursor mutably, so the borrow checker
//!   enforces that.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

use wiredtiger_sys as sys;

/// A WiredTiger return code other than 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code(pub i32);

impl Code {
    pub const ROLLBACK: Code = Code(sys::WT_ROLLBACK);
    pub const PREPARE_CONFLICT: Code = Code(sys::WT_PREPARE_CONFLICT);
    pub const DUPLICATE_KEY: Code = Code(sys::WT_DUPLICATE_KEY);
    pub const NOTFOUND: Code = Code(sys::WT_NOTFOUND);
    pub const EBUSY: Code = Code(libc_errno::EBUSY);
    pub const ENOENT: Code = Code(libc_errno::ENOENT);
    pub const EINVAL: Code = Code(libc_errno::EINVAL);

    pub fn message(self) -> String {
        // SAFETY: wiredtiger_strerror accepts any code and returns a pointer to a static,
        // NUL-terminated string (or a thread-local buffer for unknown codes); we copy it.
        unsafe { CStr::from_ptr(sys::wiredtiger_strerror(self.0)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The POSIX codes we branch on; spelled out to avoid a libc dependency.
mod libc_errno {
    pub const ENOENT: i32 = 2;
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
}

pub type WtResult<T> = std::result::Result<T, Code>;

#[inline]
fn check(ret: c_int) -> WtResult<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Code(ret))
    }
}

fn cstring(s: &str) -> CString {
    // Callers pass URIs we generate and fixed config strings: never with interior NULs.
    CString::new(s).expect("interior NUL in a WiredTiger string")
}

/// Calls a WiredTiger method through its function-pointer field. The fields are
/// `Option<fn>` in the bindings but WiredTiger always fills them in.
macro_rules! method {
    ($obj:expr, $name:ident) => {
        (*$obj)
            .$name
            .expect(concat!("WiredTiger method ", stringify!($name), " is null"))
    };
}

// ---------------------------------------------------------------------------------------
// Event handler: route WiredTiger's messages into `tracing` instead of stderr.

unsafe extern "C" fn handle_error(
    _handler: *mut sys::WT_EVENT_HANDLER,
    _session: *mut sys::WT_SESSION,
    error: c_int,
    message: *const c_char,
) -> c_int {
    // SAFETY: WiredTiger passes a valid NUL-terminated message for the call's duration.
    let msg = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    // Expected conditions (missing table, busy drop, rollback) are reported to callers as
    // errors anyway; keep them out of the warning stream.
    if error == libc_errno::ENOENT || error == libc_errno::EBUSY || error == sys::WT_ROLLBACK {
        tracing::debug!(target: "wiredtiger", code = error, "{msg}");
    } else {
        tracing::warn!(target: "wiredtiger", code = error, "{msg}");
    }
    0
}

unsafe extern "C" fn handle_message(
    _handler: *mut sys::WT_EVENT_HANDLER,
    _session: *mut sys::WT_SESSION,
    message: *const c_char,
) -> c_int {
    // SAFETY: as above.
    let msg = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    tracing::info!(target: "wiredtiger", "{msg}");
    0
}

unsafe extern "C" fn handle_progress(
    _handler: *mut sys::WT_EVENT_HANDLER,
    _session: *mut sys::WT_SESSION,
    _operation: *const c_char,
    _progress: u64,
) -> c_int {
    0
}

unsafe extern "C" fn handle_close(
    _handler: *mut sys::WT_EVENT_HANDLER,
    _session: *mut sys::WT_SESSION,
    _cursor: *mut sys::WT_CURSOR,
) -> c_int {
    0
}

/// WiredTiger keeps the handler pointer for the connection's lifetime, so it must be
/// 'static; it holds only function pointers, so one shared immutable instance suffices.
///
/// Every field must be `Some`: `__wt_event_handler_set` *writes* its defaults into any
/// NULL field of the caller's struct, and this static lives in read-only memory (a
/// SIGSEGV inside `wiredtiger_open` otherwise). With all four set, WiredTiger only reads it.
struct StaticHandler(sys::WT_EVENT_HANDLER);
// SAFETY: with every field set, the handler is never mutated (see above).
unsafe impl Sync for StaticHandler {}

static EVENT_HANDLER: StaticHandler = StaticHandler(sys::WT_EVENT_HANDLER {
    handle_error: Some(handle_error),
    handle_message: Some(handle_message),
    handle_progress: Some(handle_progress),
    handle_close: Some(handle_close),
});

// ---------------------------------------------------------------------------------------

/// "transaction: transaction range of IDs currently pinned", a connection statistic.
pub const STAT_TXN_PINNED_RANGE: u32 = sys::WT_STAT_CONN_TXN_PINNED_RANGE;

pub struct Connection {
    ptr: NonNull<sys::WT_CONNECTION>,
}

// SAFETY: WT_CONNECTION methods are thread-safe (WiredTiger documents the connection
// handle as shareable among threads); only `close` must be exclusive, and it takes `self`.
unsafe impl Send for Connection {}
unsafe impl Sync for Connection {}

impl Connection {
    /// `wiredtiger_open`. The directory must already exist.
    pub fn open(dir: &Path, config: &str) -> WtResult<Connection> {
        let home = cstring(dir.to_str().expect("database path must be UTF-8"));
        let config = cstring(config);
        let mut conn: *mut sys::WT_CONNECTION = ptr::null_mut();
        // SAFETY: valid C strings for the call; the handler is 'static and WiredTiger only
        // reads it; `conn` is an out-pointer.
        let ret = unsafe {
            sys::wiredtiger_open(
                home.as_ptr(),
                &EVENT_HANDLER.0 as *const _ as *mut _,
                config.as_ptr(),
                &mut conn,
            )
        };
        check(ret)?;
        Ok(Connection {
            ptr: NonNull::new(conn).expect("wiredtiger_open returned success and null"),
        })
    }

    /// `set_timestamp`, e.g. `oldest_timestamp=1a,stable_timestamp=2b` (hex).
    pub fn set_timestamp(&self, config: &CStr) -> WtResult<()> {
        // SAFETY: the connection is open (we own it); set_timestamp is thread-safe.
        unsafe {
            let c = self.ptr.as_ptr();
            check(method!(c, set_timestamp)(c, config.as_ptr()))
        }
    }

    /// `query_timestamp` with `get=<which>`; 0 when WiredTiger has none to report.
    pub fn query_timestamp(&self, which: &str) -> WtResult<u64> {
        let config = cstring(&format!("get={which}"));
        // Room for a 64-bit timestamp in hex and its NUL (WT_TS_HEX_STRING_SIZE).
        let mut hex = [0 as c_char; 2 * 8 + 1 + 7];
        // SAFETY: as in `set_timestamp`; `hex` is larger than WiredTiger ever writes.
        unsafe {
            let c = self.ptr.as_ptr();
            check(method!(c, query_timestamp)(
                c,
                hex.as_mut_ptr(),
                config.as_ptr(),
            ))?;
        }
        // SAFETY: WiredTiger wrote a NUL-terminated string into the zeroed buffer.
        let text = unsafe { CStr::from_ptr(hex.as_ptr()) }.to_string_lossy();
        Ok(u64::from_str_radix(&text, 16).unwrap_or(0))
    }

    pub fn open_session(&self, config: &str) -> WtResult<Session> {
        let config = cstring(config);
        let mut session: *mut sys::WT_SESSION = ptr::null_mut();
        // SAFETY: the connection is open (we own it); open_session is thread-safe.
        let ret = unsafe {
            let c = self.ptr.as_ptr();
            method!(c, open_session)(c, ptr::null_mut(), config.as_ptr(), &mut session)
        };
        check(ret)?;
        Ok(Session {
            ptr: NonNull::new(session).expect("open_session returned success and null"),
        })
    }
}

impl Drop for Connection {
    /// Closes every session still open and takes a final checkpoint. The owner must have
    /// dropped all `Session` wrappers first (closing a session twice is undefined).
    fn drop(&mut self) {
        // SAFETY: we own the handle, and by the owner's contract no session of it remains.
        let ret = unsafe {
            let c = self.ptr.as_ptr();
            method!(c, close)(c, ptr::null())
        };
        if ret != 0 {
            tracing::error!(
                code = ret,
                "closing the WiredTiger connection: {}",
                Code(ret).message()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------

pub struct Session {
    ptr: NonNull<sys::WT_SESSION>,
}

// SAFETY: a session may move between threads as long as only one uses it at a time; the
// wrapper is !Sync and every method takes `&mut self` or `&self` on a non-shared owner.
unsafe impl Send for Session {}

impl Session {
    pub fn create(&mut self, uri: &str, config: &str) -> WtResult<()> {
        let (uri, config) = (cstring(uri), cstring(config));
        // SAFETY: open session used by one thread (we hold &mut); strings live for the call.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, create)(s, uri.as_ptr(), config.as_ptr()))
        }
    }

    pub fn drop_object(&mut self, uri: &str, config: &str) -> WtResult<()> {
        let (uri, config) = (cstring(uri), cstring(config));
        // SAFETY: as in `create`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, drop)(s, uri.as_ptr(), config.as_ptr()))
        }
    }

    pub fn checkpoint(&mut self, config: Option<&str>) -> WtResult<()> {
        let config = config.map(cstring);
        // SAFETY: as in `create`; a null config means defaults.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, checkpoint)(
                s,
                config.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            ))
        }
    }

    /// `begin_transaction(NULL)`: the session's default isolation.
    #[inline]
    pub fn begin(&mut self) -> WtResult<()> {
        // SAFETY: as in `create`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, begin_transaction)(s, ptr::null()))
        }
    }

    #[inline]
    pub fn commit(&mut self) -> WtResult<()> {
        // SAFETY: as in `create`. Commit resets (but keeps open) all cursors of the session.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, commit_transaction)(s, ptr::null()))
        }
    }

    /// `begin_transaction` with a configuration, e.g. `read_timestamp=1a` (hex).
    #[inline]
    pub fn begin_with(&mut self, config: &CStr) -> WtResult<()> {
        // SAFETY: as in `create`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, begin_transaction)(s, config.as_ptr()))
        }
    }

    /// `commit_transaction` with a configuration, e.g. `commit_timestamp=1a` (hex).
    #[inline]
    pub fn commit_with(&mut self, config: &CStr) -> WtResult<()> {
        // SAFETY: as in `commit`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, commit_transaction)(s, config.as_ptr()))
        }
    }

    /// `prepare_transaction` with a configuration (`prepare_timestamp=1a`, hex).
    pub fn prepare_with(&mut self, config: &CStr) -> WtResult<()> {
        // SAFETY: as in `create`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, prepare_transaction)(s, config.as_ptr()))
        }
    }

    #[inline]
    pub fn rollback(&mut self) -> WtResult<()> {
        // SAFETY: as in `create`.
        unsafe {
            let s = self.ptr.as_ptr();
            check(method!(s, rollback_transaction)(s, ptr::null()))
        }
    }

    /// Opens a cursor. The caller must close (drop) it before this session.
    pub fn open_cursor(&mut self, uri: &str, config: Option<&str>) -> WtResult<Cursor> {
        let uri = cstring(uri);
        let config = config.map(cstring);
        let mut cursor: *mut sys::WT_CURSOR = ptr::null_mut();
        // SAFETY: as in `create`; `cursor` is an out-pointer.
        let ret = unsafe {
            let s = self.ptr.as_ptr();
            method!(s, open_cursor)(
                s,
                uri.as_ptr(),
                ptr::null_mut(),
                config.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                &mut cursor,
            )
        };
        check(ret)?;
        Ok(Cursor {
            ptr: NonNull::new(cursor).expect("open_cursor returned success and null"),
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: we own the session; its cursors were dropped first (owner's contract),
        // though WiredTiger would also close any left open.
        let ret = unsafe {
            let s = self.ptr.as_ptr();
            method!(s, close)(s, ptr::null())
        };
        if ret != 0 {
            tracing::warn!(
                code = ret,
                "closing a WiredTiger session: {}",
                Code(ret).message()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------

/// A cursor on a `key_format=u,value_format=u` table (raw byte keys and values), or on the
/// metadata (`key_format=S`, see [`Cursor::key_str`]).
pub struct Cursor {
    ptr: NonNull<sys::WT_CURSOR>,
}

// SAFETY: like its session, a cursor may move between threads but not be shared.
unsafe impl Send for Cursor {}

fn item(data: &[u8]) -> sys::WT_ITEM {
    sys::WT_ITEM {
        data: data.as_ptr().cast(),
        size: data.len(),
        mem: ptr::null_mut(),
        memsize: 0,
        flags: 0,
    }
}

impl Cursor {
    /// Sets the key from a WT_ITEM. WiredTiger keeps the pointer, not a copy.
    ///
    /// SAFETY (caller): `key` must outlive the next cursor operation that uses the key.
    #[inline]
    unsafe fn set_key(&mut self, key: &sys::WT_ITEM) {
        let c = self.ptr.as_ptr();
        // SAFETY: for key_format=u the variadic argument is a `WT_ITEM *`.
        unsafe { method!(c, set_key)(c, key as *const sys::WT_ITEM) }
    }

    #[inline]
    unsafe fn set_value(&mut self, value: &sys::WT_ITEM) {
        let c = self.ptr.as_ptr();
        // SAFETY: for value_format=u the variadic argument is a `WT_ITEM *`.
        unsafe { method!(c, set_value)(c, value as *const sys::WT_ITEM) }
    }

    /// Point lookup: the value, borrowed until the next operation on this cursor.
    #[inline]
    pub fn search(&mut self, key: &[u8]) -> WtResult<Option<&[u8]>> {
        let k = item(key);
        // SAFETY: `k` and `key` live until `search` returns; after a successful search
        // WiredTiger's key points at its own memory.
        let ret = unsafe {
            self.set_key(&k);
            let c = self.ptr.as_ptr();
            method!(c, search)(c)
        };
        match check(ret) {
            Ok(()) => self.value().map(Some),
            Err(Code::NOTFOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Positions at `key` or a neighbour: `Some(0)` exact, `Some(<0)` the nearest key is
    /// smaller, `Some(>0)` larger, `None` if the table is empty.
    #[inline]
    pub fn search_near(&mut self, key: &[u8]) -> WtResult<Option<i32>> {
        let k = item(key);
        let mut exact: c_int = 0;
        // SAFETY: as in `search`; `exact` is an out-pointer.
        let ret = unsafe {
            self.set_key(&k);
            let c = self.ptr.as_ptr();
            method!(c, search_near)(c, &mut exact)
        };
        match check(ret) {
            Ok(()) => Ok(Some(exact)),
            Err(Code::NOTFOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `insert`: overwrites unless the cursor was opened with `overwrite=false`, in which
    /// case an existing key fails with `WT_DUPLICATE_KEY`.
    #[inline]
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> WtResult<()> {
        let (k, v) = (item(key), item(value));
        // SAFETY: `k`, `v` and the slices they point to live until `insert` returns. An
        // insert leaves the cursor unpositioned; the next operation sets a new key before
        // WiredTiger reads one, so the stale pointers are never dereferenced.
        unsafe {
            self.set_key(&k);
            self.set_value(&v);
            let c = self.ptr.as_ptr();
            check(method!(c, insert)(c))
        }
    }

    /// `remove`; with the default `overwrite=true` a missing key is not an error.
    #[inline]
    pub fn remove(&mut self, key: &[u8]) -> WtResult<()> {
        let k = item(key);
        // SAFETY: as in `insert`.
        unsafe {
            self.set_key(&k);
            let c = self.ptr.as_ptr();
            check(method!(c, remove)(c))
        }
    }

    /// Moves to the next record (the first one from an unpositioned cursor); `false` at the end.
    #[inline]
    pub fn next(&mut self) -> WtResult<bool> {
        // SAFETY: cursor owned and used by one thread.
        let ret = unsafe {
            let c = self.ptr.as_ptr();
            method!(c, next)(c)
        };
        positioned(ret)
    }

    /// Moves to the previous record (the last one from an unpositioned cursor).
    #[inline]
    pub fn prev(&mut self) -> WtResult<bool> {
        // SAFETY: cursor owned and used by one thread.
        let ret = unsafe {
            let c = self.ptr.as_ptr();
            method!(c, prev)(c)
        };
        positioned(ret)
    }

    /// Releases the position (and any pinned page) and clears the key and value.
    #[inline]
    pub fn reset(&mut self) -> WtResult<()> {
        // SAFETY: cursor owned and used by one thread.
        unsafe {
            let c = self.ptr.as_ptr();
            check(method!(c, reset)(c))
        }
    }

    /// The current key of a positioned `u` cursor.
    #[inline]
    pub fn key(&mut self) -> WtResult<&[u8]> {
        let mut it = item(&[]);
        // SAFETY: the cursor is positioned (callers only ask after a successful move); for
        // key_format=u the variadic out-argument is a `WT_ITEM *`. The data stays valid
        // until the next operation on the cursor, which needs `&mut self` again.
        unsafe {
            let c = self.ptr.as_ptr();
            check(method!(c, get_key)(c, &mut it as *mut sys::WT_ITEM))?;
            Ok(item_slice(&it))
        }
    }

    /// The current value of a positioned `u` cursor.
    #[inline]
    pub fn value(&mut self) -> WtResult<&[u8]> {
        let mut it = item(&[]);
        // SAFETY: as in `key`.
        unsafe {
            let c = self.ptr.as_ptr();
            check(method!(c, get_value)(c, &mut it as *mut sys::WT_ITEM))?;
            Ok(item_slice(&it))
        }
    }

    /// The current key of a positioned `S` (string) cursor, e.g. `metadata:`.
    pub fn key_str(&mut self) -> WtResult<String> {
        self.string_out(false)
    }

    /// The current value of a positioned `S` (string) cursor, e.g. `metadata:`.
    pub fn value_str(&mut self) -> WtResult<String> {
        self.string_out(true)
    }

    fn string_out(&mut self, value: bool) -> WtResult<String> {
        let mut p: *const c_char = ptr::null();
        // SAFETY: for format `S` the out-argument is a `const char **`; we copy the string
        // before the next operation on the cursor.
        unsafe {
            let c = self.ptr.as_ptr();
            let get = if value {
                method!(c, get_value)
            } else {
                method!(c, get_key)
            };
            check(get(c, &mut p as *mut *const c_char))?;
            Ok(CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    }
}

impl Cursor {
    /// The value of statistic `key` (a `WT_STAT_*` constant) from a `statistics:` cursor.
    pub fn statistic(&mut self, key: u32) -> WtResult<i64> {
        let key = c_int::try_from(key).expect("statistics keys are small");
        let (mut desc, mut printable): (*const c_char, *const c_char) = (ptr::null(), ptr::null());
        let mut value: i64 = 0;
        // SAFETY: a statistics cursor's key_format is `i` (an int argument) and its
        // value_format `SSq` (two `const char **` and an `int64_t *` out-arguments).
        unsafe {
            let c = self.ptr.as_ptr();
            method!(c, set_key)(c, key);
            check(method!(c, search)(c))?;
            check(method!(c, get_value)(
                c,
                &mut desc as *mut *const c_char,
                &mut printable as *mut *const c_char,
                &mut value as *mut i64,
            ))?;
        }
        Ok(value)
    }
}

/// SAFETY (caller): `it` was filled in by WiredTiger and its memory is still valid.
unsafe fn item_slice<'a>(it: &sys::WT_ITEM) -> &'a [u8] {
    if it.size == 0 {
        &[]
    } else {
        // SAFETY: WiredTiger reports `size` readable bytes at `data`.
        unsafe { std::slice::from_raw_parts(it.data.cast::<u8>(), it.size) }
    }
}

#[inline]
fn positioned(ret: c_int) -> WtResult<bool> {
    match check(ret) {
        Ok(()) => Ok(true),
        Err(Code::NOTFOUND) => Ok(false),
        Err(e) => Err(e),
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        // SAFETY: we own the cursor; its session is still open (owner's contract).
        let ret = unsafe {
            let c = self.ptr.as_ptr();
            method!(c, close)(c)
        };
        if ret != 0 {
            tracing::warn!(
                code = ret,
                "closing a WiredTiger cursor: {}",
                Code(ret).message()
            );
        }
    }
}
