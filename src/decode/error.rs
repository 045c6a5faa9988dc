//! What can be wrong with the bytes of a profile. Messages name the broken part; the caller
//! adds the file or target they came from.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum DecodeError {
    #[error("empty: no bytes to decode")]
    Empty,
    #[error("not a pprof profile: {0}")]
    NotProfile(String),
    #[error("truncated gzip stream: the data ends before the end of the compressed profile")]
    TruncatedGzip,
    #[error("corrupt gzip stream: {0}")]
    BadGzip(String),
    #[error(
        "decompressed profile is larger than {max} bytes (a decompression bomb, or raise --max-decompressed)"
    )]
    TooLarge { max: u64 },
    #[error("not a valid pprof protobuf: {0}")]
    Protobuf(String),
    #[error("invalid profile: {0}")]
    Invalid(String),
}
