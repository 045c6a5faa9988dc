//! The `heapwatch` command. Thin: parse flags, run one command, turn its error into a message
//! and an exit code (0 ok, 1 a check tripped, 2 usage or input error, 3 target unreachable).

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(err) => {
            if err.is_broken_pipe() {
                return ExitCode::SUCCESS;
            }
            eprintln!("heapwatch: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
