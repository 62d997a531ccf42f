//! The CPU a box's processes have used so far, read from `/proc` before the box is killed.
//!
//! A box killed from outside (its deadline, an escape, an ending) loses its program's CPU time:
//! the dying pid 1 ignores SIGCHLD while its namespace is emptied, so the kernel reaps the
//! killed processes without adding their times to pid 1's, and pid 1 never sends the program's
//! own status. So the watch sums, just before the kill, what every process of the box has used
//! (its own time and that of the children it reaped): pid 1 and its descendants, found through
//! `/proc/PID/task/TID/children` (every orphan of the box is pid 1's child).

use std::collections::HashSet;

/// User plus system CPU of `pid1` and every process below it, in milliseconds; what cannot be
/// read (a process that ended meanwhile, a kernel without `children` files) counts as nothing.
pub(crate) fn tree_ms(pid1: i32) -> u64 {
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let mut seen = HashSet::new();
    let mut todo = vec![pid1];
    let mut ticks = 0u64;
    while let Some(pid) = todo.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            ticks += stat_ticks(&stat);
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(kids) = std::fs::read_to_string(task.path().join("children")) {
                todo.extend(
                    kids.split_whitespace()
                        .filter_map(|k| k.parse::<i32>().ok()),
                );
            }
        }
    }
    ticks * 1000 / hz
}

/// utime + stime + cutime + cstime (fields 14 to 17) of a `/proc/PID/stat` line, in clock
/// ticks. The command name (field 2) may hold spaces and parentheses, so fields are counted
/// from the last `)`.
fn stat_ticks(stat: &str) -> u64 {
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0;
    };
    // After `)`: field 3 (state) is the first; 14..=17 are the 12th to 15th.
    rest.split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_time_fields_are_summed_past_a_name_with_parentheses() {
        let line = "42 (a (b) c) R 1 42 42 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 99 0";
        assert_eq!(stat_ticks(line), 250 + 50 + 7 + 3);
        assert_eq!(stat_ticks("garbage"), 0);
    }

    #[test]
    fn a_busy_child_is_counted_while_it_runs() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn sh");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let me = i32::try_from(std::process::id()).unwrap();
        let ms = tree_ms(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(ms >= 100, "{ms} ms: the busy child was not counted");
    }
}
