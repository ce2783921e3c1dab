//! What the machine has: RAM totals read from the operating system.

/// Total RAM from `/proc/meminfo` (Linux); `None` elsewhere.
pub fn total_ram_bytes() -> Option<u64> {
    meminfo_kib("MemTotal:").map(|k| k * 1024)
}

/// RAM available for new allocations from `/proc/meminfo` (Linux); `None` elsewhere.
pub fn available_ram_bytes() -> Option<u64> {
    meminfo_kib("MemAvailable:").map(|k| k * 1024)
}

fn meminfo_kib(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}
