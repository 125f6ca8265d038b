//! OP_COMPRESSED compressors. Decompression never produces (or allocates much) more than
//! the `uncompressedSize` the sender declared, so a lying header cannot become a bomb.

use std::io::Read;

use crate::wire_error::{malformed, WireError};

/// A compressor negotiated in the `hello` handshake (`compression: [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compressor {
    Snappy,
    Zlib,
    Zstd,
}

/// Id of the "noop" compressor: the payload is stored uncompressed.
pub(crate) const NOOP_ID: u8 = 0;

/// Snappy cannot expand input by more than ~21.3x (a 3-byte copy emits at most 64 bytes),
/// so a header claiming more is lying; checked before the output buffer is allocated.
const SNAPPY_MAX_RATIO: usize = 22;

/// Zstd frames may ask for a window of up to 2 GiB; legitimate senders of messages of at
/// most 48 MB use far less (level 3 uses 2 MiB). Caps the decoder's allocation at 16 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

impl Compressor {
    /// Parses a name from the `compression` list of `hello` (unknown names → `None`).
    pub fn from_name(name: &str) -> Option<Compressor> {
        match name {
            "snappy" => Some(Compressor::Snappy),
            "zlib" => Some(Compressor::Zlib),
            "zstd" => Some(Compressor::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    /// The `compressorId` byte of OP_COMPRESSED.
    pub fn id(self) -> u8 {
        match self {
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    /// `None` for unknown ids and for noop (0), which carries uncompressed data.
    pub fn from_id(id: u8) -> Option<Compressor> {
        match id {
            1 => Some(Compressor::Snappy),
            2 => Some(Compressor::Zlib),
            3 => Some(Compressor::Zstd),
            _ => None,
        }
    }

    pub(crate) fn compress(self, data: &[u8]) -> Vec<u8> {
        match self {
            Compressor::Snappy => {
                // Only fails for inputs above ~4 GiB, far beyond MAX_MESSAGE_SIZE.
                snap::raw::Encoder::new()
                    .compress_vec(data)
                    .expect("snappy input within limits")
            }
            Compressor::Zlib => {
                use std::io::Write;
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).expect("writing to a Vec cannot fail");
                e.finish().expect("writing to a Vec cannot fail")
            }
            Compressor::Zstd => {
                zstd::bulk::compress(data, 0).expect("zstd compression of an in-memory buffer")
            }
        }
    }
}

/// Appends exactly `expected` decompressed bytes of `input` to `out`, or fails.
pub(crate) fn decompress_into(
    compressor_id: u8,
    input: &[u8],
    expected: usize,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let start = out.len();
    match compressor_id {
        NOOP_ID => {
            if input.len() != expected {
                return Err(size_lie(expected, input.len()));
            }
            out.extend_from_slice(input);
        }
        1 => {
            let claimed =
                snap::raw::decompress_len(input).map_err(|e| malformed(format!("snappy: {e}")))?;
            if claimed != expected || expected > input.len().saturating_mul(SNAPPY_MAX_RATIO) {
                return Err(size_lie(expected, claimed));
            }
            out.resize(start + expected, 0);
            let n = snap::raw::Decoder::new()
                .decompress(input, &mut out[start..])
                .map_err(|e| malformed(format!("snappy: {e}")))?;
            if n != expected {
                return Err(size_lie(expected, n));
            }
        }
        2 => {
            let d = flate2::read::ZlibDecoder::new(input);
            read_bounded(d, expected, out, "zlib")?;
        }
        3 => {
            let mut d = zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| malformed(format!("zstd: {e}")))?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| malformed(format!("zstd: {e}")))?;
            read_bounded(d, expected, out, "zstd")?;
        }
        other => return Err(malformed(format!("unknown compressor id {other}"))),
    }
    Ok(())
}

/// Streams at most `expected + 1` bytes, so the output grows with what is really there.
fn read_bounded(
    r: impl Read,
    expected: usize,
    out: &mut Vec<u8>,
    what: &str,
) -> Result<(), WireError> {
    let start = out.len();
    out.reserve(expected.min(1 << 20));
    r.take(expected as u64 + 1)
        .read_to_end(out)
        .map_err(|e| malformed(format!("{what}: {e}")))?;
    let got = out.len() - start;
    if got != expected {
        return Err(size_lie(expected, got));
    }
    Ok(())
}

fn size_lie(expected: usize, got: usize) -> WireError {
    malformed(format!(
        "uncompressedSize {expected} does not match the decompressed data ({got} bytes)"
    ))
}
