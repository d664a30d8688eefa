//! What a producer describes: a flow's jobs and their dependencies, and
//! the checks that refuse a flow before anything is written.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::plan::{FlowJob, Plan, Policy};

/// Most jobs in one flow.
pub const MAX_FLOW_JOBS: usize = 10_000;
/// Most payload bytes in one flow, all jobs together.
pub const MAX_FLOW_BYTES: usize = 64 << 20;

/// A flow as a producer describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSpec {
    /// The flow's id (letters, digits and `_-.:@`, 1 to 64); `None`
    /// generates one.
    pub id: Option<String>,
    /// Its jobs, in any order.
    pub jobs: Vec<FlowJob>,
    /// When a job is dead-lettered, cancel every job of the flow that has
    /// not started.
    pub fail_fast: bool,
}

/// A flow id: 1 to 64 letters, digits or `_-.:@` (it is part of a key's
/// hash tag and of each job's id).
pub fn check_flow_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 64 || !id.chars().all(label_char) {
        return Err(format!(
            "flow id {id:?} is not 1 to 64 letters, digits or _-.:@"
        ));
    }
    Ok(())
}

pub(super) fn label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-.:@".contains(c)
}

impl FlowSpec {
    /// Check the flow and number its jobs, with `id` for a flow that names
    /// none. Refused, naming the job: an empty flow or one over
    /// [`MAX_FLOW_JOBS`] or [`MAX_FLOW_BYTES`], a bad or repeated name, an
    /// empty topic, a dependency on a name not in the flow or on itself, a
    /// repeated dependency, a cycle (named in full).
    pub fn plan(self, id: impl FnOnce() -> String) -> Result<Plan, String> {
        let id = self.id.unwrap_or_else(id);
        check_flow_id(&id)?;
        let n = self.jobs.len();
        if n == 0 {
            return Err(format!("flow {id}: no jobs"));
        }
        let index = check_jobs(&id, &self.jobs)?;
        let mut deps = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        for (i, job) in self.jobs.iter().enumerate() {
            for dep in &job.after {
                let Some(&d) = index.get(dep.name.as_str()) else {
                    return Err(format!(
                        "flow {id}: job {:?} depends on {:?}, which is not in the flow",
                        job.name, dep.name
                    ));
                };
                if d as usize == i {
                    return Err(format!("flow {id}: job {:?} depends on itself", job.name));
                }
                if deps[i].iter().any(|&(e, _)| e == d) {
                    return Err(format!(
                        "flow {id}: job {:?} names {:?} twice",
                        job.name, dep.name
                    ));
                }
                deps[i].push((d, dep.policy));
                dependents[d as usize].push(i as u32);
            }
        }
        if let Some(cycle) = find_cycle(&deps) {
            let names: Vec<&str> = cycle
                .iter()
                .map(|&i| self.jobs[i as usize].name.as_str())
                .collect();
            return Err(format!(
                "flow {id}: a cycle: {} (each waits for the next)",
                names.join(" → ")
            ));
        }
        Ok(Plan {
            id,
            jobs: self.jobs,
            deps,
            dependents,
            fail_fast: self.fail_fast,
            batch: None,
        })
    }
}

/// Check `jobs` of flow `id` (how many, their bytes, names and topics) and
/// answer their indices by name.
pub(super) fn check_jobs<'a>(
    id: &str,
    jobs: &'a [FlowJob],
) -> Result<HashMap<&'a str, u32>, String> {
    let n = jobs.len();
    if n > MAX_FLOW_JOBS {
        return Err(format!(
            "flow {id}: {n} jobs, over the limit of {MAX_FLOW_JOBS}"
        ));
    }
    let bytes: usize = jobs.iter().map(|j| j.payload.len()).sum();
    if bytes > MAX_FLOW_BYTES {
        return Err(format!(
            "flow {id}: {bytes} bytes of payloads, over the limit of {MAX_FLOW_BYTES}"
        ));
    }
    let mut index = HashMap::with_capacity(n);
    for (i, job) in jobs.iter().enumerate() {
        check_job_name(id, i, &job.name)?;
        if job.topic.is_empty() {
            return Err(format!("flow {id}: job {:?} has no topic", job.name));
        }
        if index.insert(job.name.as_str(), i as u32).is_some() {
            return Err(format!("flow {id}: two jobs are named {:?}", job.name));
        }
    }
    Ok(index)
}

/// A job's name: 1 to 128 letters, digits or `_-.:@`; `i` counts from 0.
pub(super) fn check_job_name(id: &str, i: usize, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 || !name.chars().all(label_char) {
        return Err(format!(
            "flow {id}: job {}: name {name:?} is not 1 to 128 letters, digits or _-.:@",
            i + 1
        ));
    }
    Ok(())
}

/// A cycle among `deps` (job → the jobs it waits for), as a closed path,
/// or none. Iterative (a 10,000-job chain must not overflow the stack).
fn find_cycle(deps: &[Vec<(u32, Policy)>]) -> Option<Vec<u32>> {
    // 0 unseen, 1 on the current path, 2 done
    let mut mark = vec![0u8; deps.len()];
    for start in 0..deps.len() {
        if mark[start] != 0 {
            continue;
        }
        let mut path: Vec<(u32, usize)> = vec![(start as u32, 0)];
        mark[start] = 1;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            match deps[node as usize].get(*next) {
                Some(&(d, _)) => {
                    *next += 1;
                    match mark[d as usize] {
                        0 => {
                            mark[d as usize] = 1;
                            path.push((d, 0));
                        }
                        1 => {
                            let from = path.iter().position(|&(p, _)| p == d).expect("on path");
                            let mut cycle: Vec<u32> =
                                path[from..].iter().map(|&(p, _)| p).collect();
                            cycle.push(d);
                            return Some(cycle);
                        }
                        _ => {}
                    }
                }
                None => {
                    mark[node as usize] = 2;
                    path.pop();
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Dep;

    fn job(name: &str, after: &[&str]) -> FlowJob {
        FlowJob {
            name: name.into(),
            topic: "t".into(),
            after: after
                .iter()
                .map(|a| Dep {
                    name: (*a).into(),
                    policy: Policy::Require,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn plan(jobs: Vec<FlowJob>) -> Result<Plan, String> {
        FlowSpec {
            id: Some("f1".into()),
            jobs,
            fail_fast: false,
        }
        .plan(|| unreachable!())
    }

    #[test]
    fn a_diamond_is_numbered_with_its_edges_both_ways() {
        let p = plan(vec![
            job("d", &["b", "c"]),
            job("a", &[]),
            job("b", &["a"]),
            job("c", &["a"]),
        ])
        .unwrap();
        assert_eq!(p.roots().collect::<Vec<_>>(), [1]);
        assert_eq!(p.deps[0], [(2, Policy::Require), (3, Policy::Require)]);
        assert_eq!(p.dependents[1], [2, 3]);
        assert_eq!(p.dependents[2], [0]);
    }

    #[test]
    fn bad_flows_are_refused_naming_the_job() {
        let err = |jobs| plan(jobs).unwrap_err();
        assert_eq!(
            err(vec![job("a", &["c"]), job("b", &["a"]), job("c", &["b"])]),
            "flow f1: a cycle: a → c → b → a (each waits for the next)"
        );
        assert!(
            err(vec![job("a", &["zz"])]).contains("depends on \"zz\", which is not in the flow")
        );
        assert!(err(vec![job("a", &["a"])]).contains("depends on itself"));
        assert!(err(vec![job("a", &[]), job("a", &[])]).contains("two jobs are named \"a\""));
        assert!(err(vec![job("a b", &[])]).contains("is not 1 to 128 letters"));
        assert!(err(vec![]).contains("no jobs"));
        assert!(err(vec![job("a", &[]), job("b", &["a", "a"])]).contains("names \"a\" twice"));
        let mut no_topic = job("a", &[]);
        no_topic.topic.clear();
        assert!(err(vec![no_topic]).contains("has no topic"));
        let many = (0..=MAX_FLOW_JOBS)
            .map(|i| job(&format!("j{i}"), &[]))
            .collect();
        assert!(err(many).contains("over the limit of 10000"));
        let bad_id = FlowSpec {
            id: Some("{x}".into()),
            jobs: vec![job("a", &[])],
            fail_fast: false,
        };
        assert!(
            bad_id
                .plan(|| unreachable!())
                .unwrap_err()
                .contains("flow id")
        );
    }

    #[test]
    fn a_long_chain_is_checked_without_recursion() {
        let jobs = (0..MAX_FLOW_JOBS)
            .map(|i| {
                let prev = format!("j{}", i.wrapping_sub(1));
                let after = [prev.as_str()];
                job(&format!("j{i}"), if i == 0 { &[] } else { &after })
            })
            .collect::<Vec<_>>();
        let p = plan(jobs).unwrap();
        assert_eq!(p.roots().count(), 1);
    }
}
