//! The replay's answers over the agent protocol: read the 14-byte request, answer with what the
//! recorded process would have said at that moment, in the agent's own formats.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use super::conn::Conn;
use super::{Timeline, latest};
use crate::decode::{self, DecodeLimits, stackdump};
use crate::source::agent::wire::MAGIC;
use crate::source::memstats;

/// Answers one request; returns whether the answer was cut (only heap profiles and stack
/// dumps are: their truncation is what a collector must catch).
pub(super) fn answer(
    mut conn: Conn,
    timeline: &Timeline,
    cycle: usize,
    at: i64,
    cut: bool,
    app_id: &str,
    app_version: Option<&str>,
) -> io::Result<bool> {
    conn.prepare()?;
    let mut request = [0u8; 14];
    conn.read_exact(&mut request)?;
    if request[..13] != MAGIC {
        return Ok(false); // the agent closes on a bad magic
    }
    let cycle = &timeline.cycles[cycle];
    let op = request[13];
    let body: Vec<u8> = match op {
        0x05 => match latest(&cycle.heap, at) {
            Some(p) => std::fs::read(p)?,
            None => b"no heap profile recorded".to_vec(),
        },
        0x01 => match latest(&cycle.goroutine, at) {
            Some(p) => goroutine_text(p)?,
            None => b"no goroutine capture recorded".to_vec(),
        },
        0x03 => match latest(&cycle.memstats, at) {
            Some(s) => memstats::format_agent(s).into_bytes(),
            None => b"no memstats recorded".to_vec(),
        },
        0x07 => match (latest(&cycle.stats, at), latest(&cycle.goroutine, at)) {
            (Some(s), _) => memstats::format_agent_stats(s).into_bytes(),
            // Recorded over HTTP: the goroutine count is all there is to say.
            (None, Some(p)) => match stackdump::parse(&goroutine_text(p)?) {
                Ok(dump) => format!("goroutines: {}\n", dump.goroutines()).into_bytes(),
                Err(e) => e.to_string().into_bytes(),
            },
            (None, None) => b"no stats recorded".to_vec(),
        },
        0x04 => b"go (replayed by heapwatch)\n".to_vec(),
        0x0a => {
            let mut info = serde_json::json!({"type": "replay", "id": app_id});
            if let Some(v) = app_version {
                info["version"] = v.into();
            }
            info.to_string().into_bytes()
        }
        // Ops the recording cannot answer get what the agent gives an unknown op: nothing.
        _ => return Ok(false),
    };
    if cut && matches!(op, 0x05 | 0x01) {
        conn.cut(&body)?;
        return Ok(true);
    }
    conn.write_all(&body)?;
    conn.flush()?;
    Ok(false)
}

/// A stored goroutine capture as a debug=2 text dump, whichever way it was recorded.
pub(super) fn goroutine_text(path: &PathBuf) -> io::Result<Vec<u8>> {
    let bytes = std::fs::read(path)?;
    if !decode::is_gzip(&bytes) {
        return Ok(bytes);
    }
    let profile = decode::decode(&bytes, &DecodeLimits::default()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })?;
    Ok(stackdump::from_profile(&profile).to_text().into_bytes())
}
