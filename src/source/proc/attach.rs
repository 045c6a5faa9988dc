//! Attaching to a process: checked once, before any capture. Its executable is found and read
//! (`/proc/PID/exe`: the Go build, its release's layout and GOEXPERIMENTs, the runtime's
//! variables), its load bias read from `/proc/PID/maps`, and the variables the walk reads placed
//! in the process (`Anchors`). Two checks against the live process before the first capture:
//! heap profiling is not disabled by the linker, and the text base the file gives is the one the
//! runtime uses. The attach may block (a stalled FUSE mount, a page that never arrives), so
//! `attach_within` runs it on a thread of its own.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::binary::{self, BinaryError};
use super::encode::{Encoder, ExeMapping, GoroutineEncoder};
use super::memory::{ProcessMemory, ReadFault, TargetMemory as _};
use super::walk::{self, Anchors, Limits};
use super::{ProcError, ProcSource, goroutines, memstats, module, start_time};

impl ProcSource {
    /// Checks the process now: that it is a supported Go program keeping a heap profile, and
    /// that heapwatch may read its memory.
    pub fn attach(pid: u32, target: impl Into<String>) -> Result<ProcSource, ProcError> {
        let target = target.into();
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        if pid == 0 || !proc_dir.is_dir() {
            return Err(ProcError::NoProcess { pid, target });
        }
        let started = start_time(pid);
        let exe = proc_dir.join("exe");
        let exe_meta = match fs::metadata(&exe) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(ProcError::Permission { pid, target });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let gone = !proc_dir.is_dir();
                return Err(if gone {
                    ProcError::NoProcess { pid, target }
                } else {
                    ProcError::Unreadable {
                        pid,
                        target,
                        detail: "it has no executable (a kernel thread or a zombie)".into(),
                    }
                });
            }
            Err(e) => {
                return Err(ProcError::Unreadable {
                    pid,
                    target,
                    detail: format!("{}: {e}", exe.display()),
                });
            }
        };
        let binary = binary::load(&exe).map_err(|source| match source {
            BinaryError::Read(ref e) if e.contains("denied") => ProcError::Permission {
                pid,
                target: target.clone(),
            },
            source => ProcError::Binary {
                pid,
                target: target.clone(),
                source,
            },
        })?;
        let version = binary.build.go_version.clone();
        let layout = binary
            .build
            .release()
            .and_then(walk::layout_for)
            .ok_or_else(|| ProcError::UnsupportedVersion {
                pid,
                target: target.clone(),
                version: version.clone(),
            })?;
        let layout =
            walk::with_experiments(layout, &binary.build.experiments()).map_err(|experiment| {
                ProcError::UnsupportedExperiment {
                    pid,
                    target: target.clone(),
                    version,
                    experiment,
                }
            })?;

        let mut memory = ProcessMemory::new(pid);
        let lines = memory.refresh().map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => ProcError::Permission {
                pid,
                target: target.clone(),
            },
            _ => ProcError::NoProcess {
                pid,
                target: target.clone(),
            },
        })?;
        let exe_path = fs::read_link(&exe)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let exe_lines: Vec<_> = lines
            .iter()
            .filter(|l| l.inode == exe_meta.ino() && l.inode != 0)
            .cloned()
            .collect();
        let bias = binary
            .load_bias(&exe_lines)
            .ok_or_else(|| ProcError::Unreadable {
                pid,
                target: target.clone(),
                detail: "its executable is not in /proc/PID/maps, so its load address is unknown"
                    .into(),
            })?;
        let mappings: Vec<ExeMapping> = exe_lines
            .iter()
            .filter(|l| l.executable)
            .map(|l| ExeMapping {
                start: l.start,
                end: l.end,
                offset: l.offset,
                file: exe_path.clone(),
                build_id: binary.gnu_build_id.clone(),
            })
            .collect();
        let vars = binary.vars;
        let mem_layout = binary.build.release().and_then(memstats::mem_layout_for);
        let anchors = Anchors {
            mbuckets: vars.mbuckets.wrapping_add(bias),
            mprof_cycle: vars.mprof_cycle.wrapping_add(bias),
            prof_mem_active_lock: vars.prof_mem_active_lock.map(|a| a.wrapping_add(bias)),
            numgc: vars.memstats.zip(mem_layout).map(|([m, ..], layout)| {
                m.wrapping_add(bias)
                    .wrapping_add(memstats::numgc_offset(&layout))
            }),
        };
        let goroutines = vars
            .allgs
            .zip(binary.build.release().and_then(goroutines::g_layout_for));
        let source = ProcSource {
            pid,
            target,
            goroutines: goroutines.map(|(at, l)| (at.wrapping_add(bias), l)),
            goroutine_encoder: GoroutineEncoder::new(&mappings),
            memstats: vars.memstats.zip(mem_layout).map(|([m, g, h, p], layout)| {
                let at = |a: u64| a.wrapping_add(bias);
                let anchors = memstats::MemAnchors {
                    memstats: at(m),
                    gc_controller: at(g),
                    mheap: at(h),
                    allp: at(p),
                };
                (anchors, layout)
            }),
            rate_addr: vars.mem_profile_rate.wrapping_add(bias),
            binary,
            layout,
            anchors,
            bias,
            encoder: Encoder::new(&mappings),
            memory,
            started,
            text: exe_lines
                .iter()
                .find(|l| l.executable)
                .map(|l| (l.inode, l.start, l.offset)),
            limits: Limits::default(),
            reader: None,
            spare: walk::Snapshot::default(),
            gc: None,
        };
        let mut flag = [0u8; 1];
        let disable_at = vars.disable_memory_profiling.wrapping_add(bias);
        source
            .memory
            .read(disable_at, &mut flag)
            .map_err(|fault| source.attach_error(fault))?;
        if flag[0] != 0 {
            return Err(ProcError::ProfilingDisabled {
                pid,
                target: source.target,
            });
        }
        // The text base read from the file must be the one the live runtime uses, or every
        // PC would be named after a neighbour.
        let module = &source.binary.module;
        let text_at = module
            .addr
            .wrapping_add(module::TEXT_FIELD)
            .wrapping_add(bias);
        let live = source
            .memory
            .read_u64(text_at)
            .map_err(|fault| source.attach_error(fault))?;
        if live != module.text.wrapping_add(bias) {
            return Err(ProcError::Binary {
                pid,
                target: source.target.clone(),
                source: BinaryError::Module(format!(
                    "runtime.firstmoduledata.text is {live:#x} in the process, but the file \
                     gives {:#x} (load bias {bias:#x})",
                    module.text.wrapping_add(bias)
                )),
            });
        }
        Ok(source)
    }

    /// [`ProcSource::attach`] bounded by `timeout`: reading the executable (a file on a stalled
    /// FUSE mount) or the process's memory (a page that never arrives) can block for good, so
    /// the attach runs on a thread of its own, left behind at the timeout. While one is still
    /// blocked for a pid, another attach to it fails at once instead of adding a thread.
    pub fn attach_within(
        pid: u32,
        target: impl Into<String>,
        timeout: Duration,
    ) -> Result<ProcSource, ProcError> {
        static BLOCKED: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
        let blocked = BLOCKED.get_or_init(Mutex::default);
        let target = target.into();
        let stalled = |detail: String| ProcError::Unreadable {
            pid,
            target: target.clone(),
            detail,
        };
        if blocked.lock().is_ok_and(|b| b.contains(&pid)) {
            return Err(stalled(
                "an earlier attach is still blocked reading its executable or its memory (a \
                 file on a stalled FUSE mount, or a page that never arrives)"
                    .into(),
            ));
        }
        if let Ok(mut b) = blocked.lock() {
            b.insert(pid);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let name = target.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("proc-attach-{pid}"))
            .spawn(move || {
                let _ = tx.send(ProcSource::attach(pid, name));
                if let Ok(mut b) = blocked.lock() {
                    b.remove(&pid);
                }
            });
        if let Err(e) = spawned {
            if let Ok(mut b) = blocked.lock() {
                b.remove(&pid);
            }
            return Err(stalled(format!("starting an attach thread: {e}")));
        }
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Err(stalled(format!(
                "attaching did not finish within the {} timeout: reading its executable or its \
                 memory blocked (a file on a stalled FUSE mount, or a page that never arrives)",
                crate::units::format_duration(timeout)
            )))
        })
    }

    fn attach_error(&self, fault: ReadFault) -> ProcError {
        let (pid, target) = (self.pid, self.target.clone());
        match fault {
            ReadFault::Denied => ProcError::Permission { pid, target },
            ReadFault::Gone => ProcError::NoProcess { pid, target },
            other => ProcError::Unreadable {
                pid,
                target,
                detail: format!("reading the runtime's variables: {other}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_go_and_a_missing_one_is_not_there() {
        let me = std::process::id();
        let err = ProcSource::attach(me, "proc:self").err().unwrap();
        assert!(
            err.to_string()
                .starts_with(&format!("proc:self: process {me}: not a Go program")),
            "{err}"
        );
        let err = ProcSource::attach(0, "proc:0").err().unwrap();
        assert!(matches!(err, ProcError::NoProcess { pid: 0, .. }), "{err}");
        let err = ProcSource::attach_within(0, "proc:0", Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(matches!(err, ProcError::NoProcess { pid: 0, .. }), "{err}");
    }
}
