//! `hearth cache`: the disk tier's files listed, verified, pruned.

use std::process::ExitCode;

use anyhow::{bail, Result};

use std::path::Path;

use hearth::config::{AppPaths, Settings};
use hearth::model::select_device;
use hearth::persist::{
    cache_dir, conversations_dir, inspect, prune as prune_files, prune_plan, remove_stale_temps, temp_files,
    verify as verify_file, CacheEntry, ConversationStore, EntryStatus,
};

use super::args::CacheCommand;
use super::progress::bytes_bar;
use super::start::resolve_model_locally;

/// The fingerprint and layout the configured model's cache files must have, without loading
/// its weights (its files are hashed, with a progress bar), and without downloading it: cache
/// files are checked on their own when the model is not on this machine.
fn current_fingerprint(settings: &Settings) -> Result<(hearth::persist::Fingerprint, hearth::persist::KvLayout)> {
    let resolved = resolve_model_locally(settings)?;
    let shape = hearth::model::kv_shape_of(&resolved.gguf)?;
    let selected = select_device(settings.model.device)?;
    let dtype = settings.cache.kv_dtype();
    let layout = hearth::persist::kv_layout(shape, settings.cache.block_size, dtype);
    let device = hearth::model::device_name(&selected);
    let variant = hearth::model::kv_variant_of(&resolved.gguf, settings.model.context_length)?;
    let files = resolved.files();
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let pb = bytes_bar(total, "hashing the model");
    let fp = hearth::persist::fingerprint(&files, &device, &variant, &layout, &mut |done| pb.set_position(done))?;
    pb.finish_and_clear();
    Ok((fp, layout))
}

fn ago(secs_since_epoch: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let s = now.saturating_sub(secs_since_epoch);
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        7200..=172_799 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

pub fn run(settings: &Settings, paths: &AppPaths, which: CacheCommand) -> Result<ExitCode> {
    let dir = cache_dir(&paths.data_dir);
    let current = match current_fingerprint(settings) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!(
                "note: the configured model is not on this machine ({}); files are checked on their own, and none is said to fit it",
                crate::one_line(&e)
            );
            None
        }
    };
    let entries = inspect(&dir, current)?;
    match which {
        CacheCommand::List { json } => list(settings, paths, &dir, &entries, json),
        CacheCommand::Verify => verify(&entries),
        CacheCommand::Prune {
            to_gib,
            foreign,
            dry_run,
        } => prune(settings, paths, &entries, to_gib, foreign, dry_run),
    }
}

/// Where atomic writes leave temp files: the cache and conversations directories.
fn temp_dirs(paths: &AppPaths) -> [std::path::PathBuf; 2] {
    [cache_dir(&paths.data_dir), conversations_dir(&paths.data_dir)]
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// `hearth cache list`: a table (or JSON) of every cache file.
fn list(settings: &Settings, paths: &AppPaths, dir: &Path, entries: &[CacheEntry], json: bool) -> Result<ExitCode> {
    let store = ConversationStore::new(conversations_dir(&paths.data_dir));
    if json {
        println!("{}", serde_json::to_string_pretty(entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: {} cache files", dir.display(), entries.len());
    let temps: Vec<_> = temp_dirs(paths).iter().flat_map(|d| temp_files(d)).collect();
    if !temps.is_empty() {
        let bytes: u64 = temps.iter().map(|t| t.bytes).sum();
        let stale = temps.iter().filter(|t| t.stale).count();
        println!(
            "{} temp files of unfinished writes ({:.1} MiB; {stale} left by writers that are gone, deleted at the next start or by `hearth cache prune`)",
            temps.len(),
            mib(bytes)
        );
    }
    if entries.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<28} {:>10} {:>8} {:>11} {:>9}  {:<12} title",
        "conversation", "MiB", "tokens", "blocks", "last use", "status"
    );
    for e in entries {
        let title = store
            .get(&e.conversation)
            .map(|c| c.title)
            .unwrap_or_else(|_| "(no text)".into());
        let status = match &e.status {
            EntryStatus::Usable => "ok".to_string(),
            EntryStatus::Foreign => "other model".to_string(),
            EntryStatus::OtherKvDtype(t) => format!("K/V {t}"),
            EntryStatus::Unreadable(why) => format!("unreadable: {why}"),
        };
        println!(
            "{:<28} {:>10.1} {:>8} {:>5}/{:<5} {:>9}  {:<12} {}",
            e.conversation.as_str(),
            mib(e.bytes),
            e.tokens,
            e.blocks_present,
            e.blocks,
            ago(e.last_used_secs),
            status,
            title
        );
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "total {:.1} MiB of a {:.1} MiB budget",
        mib(total),
        mib(settings.cache.disk_budget_bytes)
    );
    Ok(ExitCode::SUCCESS)
}

/// `hearth cache verify`: every block of every file read and checked.
fn verify(entries: &[CacheEntry]) -> Result<ExitCode> {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let pb = bytes_bar(total, "verifying");
    let mut bad = 0;
    let mut report = Vec::new();
    for e in entries {
        match verify_file(e, |b| pb.inc(b)) {
            Ok(n) => report.push(format!("ok        {} ({n} blocks)", e.conversation)),
            Err(err) => {
                bad += 1;
                report.push(format!("DAMAGED   {}: {err}", e.conversation));
            }
        }
    }
    pb.finish_and_clear();
    for line in report {
        println!("{line}");
    }
    println!("{} files checked, {bad} damaged", entries.len());
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `hearth cache prune`: least recently used files deleted down to the budget.
fn prune(
    settings: &Settings,
    paths: &AppPaths,
    entries: &[CacheEntry],
    to_gib: Option<f64>,
    foreign: bool,
    dry_run: bool,
) -> Result<ExitCode> {
    let budget = match to_gib {
        Some(g) if !(g >= 0.0 && g.is_finite()) => bail!("--to-gib must be 0 or positive"),
        Some(g) => (g * (1u64 << 30) as f64) as u64,
        None => settings.cache.disk_budget_bytes,
    };
    let plan = prune_plan(entries, budget, foreign);
    let pb = indicatif::ProgressBar::new(plan.len() as u64);
    let freed = if dry_run {
        for e in &plan {
            println!("would delete {} ({:.1} MiB)", e.conversation, mib(e.bytes));
        }
        0
    } else {
        prune_files(&plan, |e, result| {
            match result {
                Ok(()) => pb.println(format!("deleted {} ({:.1} MiB)", e.conversation, mib(e.bytes))),
                Err(err) => pb.println(format!("cannot delete: {err}")),
            }
            pb.inc(1);
        })
    };
    pb.finish_and_clear();
    // Temp files of writes that never finished (a crash), whose writer is gone.
    if dry_run {
        for t in temp_dirs(paths).iter().flat_map(|d| temp_files(d)).filter(|t| t.stale) {
            println!(
                "would delete the leftover temp file {} ({:.1} MiB)",
                t.path.display(),
                mib(t.bytes)
            );
        }
    } else {
        let mut gone = 0;
        for d in temp_dirs(paths) {
            let sweep = remove_stale_temps(&d);
            gone += sweep.removed;
            for (path, e) in sweep.left {
                println!("cannot delete the leftover temp file {}: {e}", path.display());
            }
        }
        if gone > 0 {
            println!("deleted {gone} leftover temp files of writes that never finished");
        }
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "{} of {} files {}, {:.1} MiB freed; {:.1} MiB left (budget {:.1} MiB); conversations are kept",
        plan.len(),
        entries.len(),
        if dry_run { "to delete" } else { "deleted" },
        mib(freed),
        mib(total - freed),
        mib(budget)
    );
    Ok(ExitCode::SUCCESS)
}
