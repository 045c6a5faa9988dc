//! The event records the collector writes beside the capture attempts: a boot cycle's start
//! (`cycle`, with its process and build), a watched process's end (`exit`, from the kernel),
//! and the collector stopping on purpose (`stop`).

use super::{CaptureRecord, Collector, RecordKind, StoreError};

impl Collector {
    /// An `exit` record for each watched process the kernel saw end, filed under the boot
    /// cycle the process answered in (else the current one: compare the pid).
    pub(super) async fn note_exits(&mut self) -> Result<(), StoreError> {
        let Some(exits) = &self.exits else {
            return Ok(());
        };
        for exit in exits.take() {
            let cycle = self
                .cycle_of_pid
                .get(&exit.pid)
                .copied()
                .unwrap_or_else(|| self.cycles.current());
            let mut record = CaptureRecord::new(self.next_seq, RecordKind::Exit, cycle, exit.t_ms);
            self.next_seq += 1;
            record.pid = Some(exit.pid);
            record.exit_code = exit.exit_code;
            record.signal = exit.signal;
            self.append(record).await?;
        }
        Ok(())
    }

    /// The collector stops on purpose: a `stop` record says the target was not seen to end
    /// here, with the process it last answered from (the attempts before it say whether that
    /// process still answered).
    pub(super) async fn stopped(&mut self) -> Result<(), StoreError> {
        let mut record = CaptureRecord::new(
            self.next_seq,
            RecordKind::Stop,
            self.cycles.current(),
            self.clock.unix_ms(),
        );
        self.next_seq += 1;
        record.pid = self.cycles.pid();
        self.append(record).await
    }

    /// The first answer of a boot cycle: a `cycle` record with its process and build.
    pub(super) async fn note_cycle(&mut self, first: &CaptureRecord) -> Result<(), StoreError> {
        let build = self.build_info(self.timeout()).await;
        let mut record = CaptureRecord::new(
            self.next_seq,
            RecordKind::Cycle,
            first.cycle,
            self.clock.unix_ms(),
        );
        self.next_seq += 1;
        record.pid = first.pid;
        record.build = build;
        if let Some(pid) = first.pid {
            self.cycle_of_pid.insert(pid, first.cycle);
        }
        self.cycle_noted = first.cycle;
        self.append(record).await
    }
}
