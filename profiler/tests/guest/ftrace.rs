//! The kernel's own count of calls to one function: ftrace's function
//! tracer, filtered to that function. It is independent of BPF, so a probe
//! run the kernel skipped is still traced here.

use std::{collections::HashMap, path::Path};

const TRACING: &str = "/sys/kernel/tracing";

fn write(file: &str, value: &str) -> Result<(), String> {
    let path = Path::new(TRACING).join(file);
    std::fs::write(&path, value).map_err(|e| format!("harness: writing {value:?} to {}: {e}", path.display()))
}

/// The function tracer, running on one function until [`finish`](Self::finish).
pub struct FunctionCalls {
    func: &'static str,
    done: bool,
}

impl FunctionCalls {
    /// Clears the trace buffer and traces every call of `func`.
    pub fn start(func: &'static str) -> Result<FunctionCalls, String> {
        let tracers = std::fs::read_to_string(Path::new(TRACING).join("available_tracers"))
            .map_err(|e| format!("harness: {TRACING}/available_tracers: {e}"))?;
        if !tracers.split_whitespace().any(|t| t == "function") {
            return Err(format!("harness: this kernel has no function tracer (available: {})", tracers.trim()));
        }
        let me = FunctionCalls { func, done: false };
        write("tracing_on", "0")?;
        write("current_tracer", "nop")?;
        write("set_ftrace_filter", func)?;
        // Opening `trace` for writing with truncation empties the buffer.
        write("trace", "")?;
        write("current_tracer", "function")?;
        write("tracing_on", "1")?;
        Ok(me)
    }

    /// Stops tracing and counts the calls per thread id. An overrun buffer is
    /// an error: the count would be short.
    pub fn finish(mut self) -> Result<HashMap<u32, u64>, String> {
        write("tracing_on", "0")?;
        let text = std::fs::read_to_string(Path::new(TRACING).join("trace"))
            .map_err(|e| format!("harness: reading {TRACING}/trace: {e}"))?;
        self.reset();
        count_calls(&text, self.func)
    }

    fn reset(&mut self) {
        self.done = true;
        let _ = write("current_tracer", "nop");
        let _ = write("set_ftrace_filter", "");
        let _ = write("trace", "");
        let _ = write("tracing_on", "1");
    }
}

impl Drop for FunctionCalls {
    fn drop(&mut self) {
        if !self.done {
            self.reset();
        }
    }
}

/// Calls of `func` per thread id in the function tracer's output.
pub fn count_calls(text: &str, func: &str) -> Result<HashMap<u32, u64>, String> {
    let mut out = HashMap::new();
    let needle = format!(": {func} <-");
    for line in text.lines() {
        if let Some(counts) = line.strip_prefix("# entries-in-buffer/entries-written:") {
            let pair = counts.split_whitespace().next().unwrap_or_default();
            if let Some((kept, written)) = pair.split_once('/')
                && kept != written
            {
                return Err(format!("harness: the trace buffer kept {kept} of {written} entries"));
            }
        }
        if line.starts_with('#') || !line.contains(&needle) {
            continue;
        }
        // `  comm-tid  [cpu] flags  time: func <-caller`; the comm may hold spaces or dashes.
        let Some((task, _)) = line.split_once(" [") else { continue };
        let Some(tid) = task.trim().rsplit_once('-').and_then(|(_, t)| t.parse::<u32>().ok()) else {
            return Err(format!("harness: no thread id in the trace line {line:?}"));
        };
        *out.entry(tid).or_insert(0) += 1;
    }
    Ok(out)
}
