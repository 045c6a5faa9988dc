//! `heapwatch top PROFILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::decode;
use heapwatch::model::aggregate::Granularity;
use heapwatch::render::top::{self as render_top, TopView};

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct TopArgs {
    /// A pprof file (gzipped or not): heap, allocs, goroutine or any other.
    profile: PathBuf,
    /// Sample type by name or index (default: the profile's default, else the last).
    #[arg(long)]
    sample: Option<String>,
    /// How many sites to show.
    #[arg(short = 'n', long = "nodecount", default_value_t = 20)]
    n: usize,
    /// Sort by cumulative value instead of flat.
    #[arg(long)]
    cum: bool,
    /// What makes two frames the same site: function, file or line.
    #[arg(long, default_value = "function", value_parser = parse_granularity)]
    granularity: Granularity,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
}

fn parse_granularity(text: &str) -> Result<Granularity, String> {
    Granularity::parse(text).ok_or_else(|| format!("{text:?} is not one of function, file, line"))
}

pub fn run(args: TopArgs) -> Result<ExitCode, CliError> {
    let shown = args.profile.display().to_string();
    if args.profile.is_dir() {
        let run = args.profile.join("manifest.jsonl").is_file();
        return Err(CliError::Usage(if run {
            format!(
                "{shown} is a run directory; top reads one profile: give one of its captures \
                 ({shown}/profiles/NNNNNN-heap.pb.gz), or use `heapwatch growth {shown}` for \
                 the whole run"
            )
        } else {
            format!("{shown} is a directory; top reads one profile file (.pb.gz)")
        }));
    }
    let bytes = std::fs::read(&args.profile).map_err(|source| CliError::Read {
        path: shown.clone(),
        source,
    })?;
    // Only the sites are shown: the stacks are folded into them as they are decoded.
    let decoded = decode::decode_sites(&bytes, &args.decode.limits(), args.granularity).map_err(
        |source| CliError::Profile {
            path: shown.clone(),
            source,
        },
    )?;
    let profile = &decoded.profile;
    if profile.sample_types.is_empty() {
        return Err(CliError::Usage(format!(
            "{shown}: the profile declares no sample types"
        )));
    }
    let index = match &args.sample {
        None => profile.default_sample_index(),
        Some(wanted) => profile.find_sample_type(wanted).ok_or_else(|| {
            let names: Vec<&str> = (0..profile.sample_types.len())
                .map(|i| profile.sample_type_name(i))
                .collect();
            CliError::Usage(format!(
                "{shown}: no sample type {wanted:?}; this profile has {}",
                names.join(", ")
            ))
        })?,
    };
    let mut table = decoded.sites(index);
    if args.cum {
        table.sort_by_cum();
    }
    let view = TopView {
        file: &shown,
        sample: profile.sample_type_name(index),
        unit: profile.sample_type_unit(index),
        table: &table,
        rows: args.n,
        by_cum: args.cum,
    };
    emit(&if args.json {
        render_top::json(&view)
    } else {
        render_top::text(&view)
    })?;
    Ok(ExitCode::SUCCESS)
}
