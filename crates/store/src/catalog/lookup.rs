//! A query's reading of the catalog ([`Lookup`]): through the groups first, so that it
//! reads the member lists, one slice per group for each address the filter names, and
//! then the records of only the files that may match (and every record past the last
//! group). The answers are those of reading every record (`Catalog::read`): a file the
//! slices rule out would be ruled out by its summary too.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tapdeck_filter::Predicate;
use xxhash_rust::xxh3::Xxh3Builder;

use super::groups::{self, Group};
use super::{record_at, Catalog, Entry, CATALOG, HEADER};

/// What the catalog says of a file, for a query.
#[derive(Debug, Clone)]
pub struct Known {
    /// Its entry; without its name and summary when the query did not need the summary
    /// (outside the window, or ruled out by its group's slices).
    pub entry: Entry,
    /// Its group's slices show no packet can match the filter.
    pub no_match: bool,
}

/// The catalog as one query needs it.
#[derive(Debug, Default)]
pub struct Lookup {
    known: HashMap<String, Known, Xxh3Builder>,
    /// Entries consulted (one per file the catalog names).
    pub consulted: u64,
    /// Groups read, and slices of them.
    pub groups: u64,
    pub slices: u64,
    /// Records read whole (with their summaries).
    pub records: u64,
}

impl Lookup {
    /// Reads what a query needs of the catalog of the store at `root`: every file's time
    /// range; for a file `outside` does not rule out, whether `prune` can match it.
    ///
    /// A name with several records (`tapdeck index` or `verify --repair` appended a later
    /// one) is ruled out when any of them rules it out: every record describes the same
    /// packets (a finished file's never change; a repaired one keeps a part of them), so
    /// each is right when it says none can match; the later one may just say more.
    pub fn read(
        root: &Path,
        outside: &dyn Fn(&Entry) -> bool,
        prune: Option<&Predicate>,
    ) -> Lookup {
        let catalog = File::open(root.join(CATALOG)).ok();
        let catalog_len = (catalog.as_ref())
            .and_then(|c| c.metadata().ok())
            .map_or(0, |m| m.len());
        let (groups_file, mut groups) = groups::read(root);
        // Groups of another catalog (this one lost, or rewritten shorter) are not used.
        groups.retain(|g| g.covers.1 <= catalog_len);
        let tail = (catalog.as_ref())
            .map(|c| uncovered(c, &groups))
            .unwrap_or_default();
        let members: usize = groups.iter().map(|g| g.members.len()).sum();
        let mut lookup = Lookup {
            known: HashMap::with_capacity_and_hasher(members + tail.len(), Xxh3Builder::new()),
            groups: groups.len() as u64,
            ..Lookup::default()
        };
        let probes = prune.map(Predicate::probes).unwrap_or_default();
        // No slices (no slices' file, or a group outside the window): "maybe".
        let slices = match (&groups_file, probes.is_empty()) {
            (Some(file), false) => prefetch(file, &groups, &probes, outside),
            _ => vec![None; groups.len()],
        };
        let mut fallback: Option<Catalog> = None;
        for (g, slices) in groups.iter().zip(&slices) {
            let slices = slices.as_deref().unwrap_or_default();
            lookup.slices += slices.len() as u64;
            let need = lookup.rule_out(g, slices, outside, prune, &probes);
            let full = read_members(catalog.as_ref(), g, &need);
            lookup.records += full.iter().filter(|e| e.is_some()).count() as u64;
            for (&mi, entry) in need.iter().zip(full) {
                let m = &g.members[mi];
                let entry = entry.or_else(|| {
                    let c = fallback.get_or_insert_with(|| Catalog::read(root));
                    c.entries.get(&m.name).cloned()
                });
                let entry = entry.unwrap_or_else(|| m.thin_entry());
                lookup.note(
                    m.name.clone(),
                    Known {
                        entry,
                        no_match: false,
                    },
                    outside,
                );
            }
        }
        lookup.records += tail.len() as u64;
        for (_, _, entry) in tail {
            lookup.note(
                entry.name.clone(),
                Known {
                    entry,
                    no_match: false,
                },
                outside,
            );
        }
        lookup.consulted = lookup.known.len() as u64;
        lookup
    }

    /// Keeps what a record says of `name`, unless an earlier record rules the file out
    /// and this one does not.
    fn note(&mut self, name: String, k: Known, outside: &dyn Fn(&Entry) -> bool) {
        let rules_out = |k: &Known| k.no_match || outside(&k.entry);
        match self.known.entry(name) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(k);
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                if rules_out(&k) || !rules_out(o.get()) {
                    o.insert(k);
                }
            }
        }
    }

    /// Settles the members of `g` that need no record (outside the window, ruled out by
    /// the slices, or no filter to apply); returns those that need theirs.
    fn rule_out(
        &mut self,
        g: &Group,
        slices: &[(usize, Option<Vec<u8>>)],
        outside: &dyn Fn(&Entry) -> bool,
        prune: Option<&Predicate>,
        probes: &[tapdeck_filter::AddressProbe],
    ) -> Vec<usize> {
        let mut need = Vec::new();
        for (mi, m) in g.members.iter().enumerate() {
            let entry = m.thin_entry();
            let no_match = match prune {
                _ if outside(&entry) => false,
                None => false,
                Some(p) if !probes.is_empty() => {
                    let holds = |probe| groups::holds(slices, mi, probe, g);
                    if p.may_match_probed(&holds) {
                        need.push(mi);
                        continue;
                    }
                    true
                }
                Some(_) => {
                    need.push(mi);
                    continue;
                }
            };
            self.note(m.name.clone(), Known { entry, no_match }, outside);
        }
        need
    }

    /// Every file the catalog names, and what it says of each.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Known)> {
        self.known.iter().map(|(n, k)| (n.as_str(), k))
    }

    /// What the catalog says of the file at `path`, if it names it.
    pub fn get(&self, path: &Path) -> Option<&Known> {
        self.known.get(path.file_name()?.to_str()?)
    }
}

/// A group's slices read for a query: (slice, its bytes if they check out).
type Slices = Vec<(usize, Option<Vec<u8>>)>;

/// The slices of `g` that hold `probes`' blocks.
fn slices_of(g: &Group, probes: &[tapdeck_filter::AddressProbe]) -> Vec<usize> {
    let mut blocks: Vec<usize> = probes.iter().map(|&p| g.slice_of(p)).collect();
    blocks.sort_unstable();
    blocks.dedup();
    blocks
}

/// Reads the slices `probes` need of every group whose time range `outside` does not rule
/// out, several at once: cold, one slice per group is one random read each, and a disk
/// answers many at once faster than one after another.
fn prefetch(
    file: &File,
    groups: &[Group],
    probes: &[tapdeck_filter::AddressProbe],
    outside: &dyn Fn(&Entry) -> bool,
) -> Vec<Option<Slices>> {
    let wanted: Vec<Option<Vec<usize>>> = groups
        .iter()
        .map(|g| {
            let span = Entry {
                name: String::new(),
                size: 0,
                first_ns: g.first_ns,
                last_ns: g.last_ns,
                packets: 1,
                summary: Vec::new(),
            };
            (g.first_ns <= g.last_ns && !outside(&span)).then(|| slices_of(g, probes))
        })
        .collect();
    let jobs: Vec<(usize, usize)> = (wanted.iter().enumerate())
        .flat_map(|(gi, w)| w.iter().flatten().map(move |&b| (gi, b)))
        .collect();
    let threads = (jobs.len() / 32).clamp(1, 8);
    let per = jobs.len().div_ceil(threads).max(1);
    let read: Vec<Option<Vec<u8>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (jobs.chunks(per))
            .map(|part| {
                let read = move || part.iter().map(|&(gi, b)| groups[gi].slice(file, b));
                (part.len(), scope.spawn(move || read().collect::<Vec<_>>()))
            })
            .collect();
        // A reader that failed answers "maybe" for its slices, in their places.
        (handles.into_iter())
            .flat_map(|(n, h)| h.join().unwrap_or_else(|_| vec![None; n]))
            .collect()
    });
    let mut out: Vec<Option<Slices>> = wanted
        .iter()
        .map(|w| w.as_ref().map(|_| Vec::new()))
        .collect();
    for ((gi, b), bytes) in jobs.into_iter().zip(read) {
        if let Some(v) = out[gi].as_mut() {
            v.push((b, bytes));
        }
    }
    out
}

/// The records of `catalog` that no group covers (those appended since the last group,
/// or those of a group that did not check out), with their offsets.
fn uncovered(catalog: &File, groups: &[Group]) -> Vec<(u64, u32, Entry)> {
    let len = catalog.metadata().map_or(0, |m| m.len());
    let mut header = [0u8; 8];
    if catalog.read_exact_at(&mut header, 0).is_err() || header != HEADER {
        return Vec::new();
    }
    let mut covered: Vec<(u64, u64)> = groups.iter().map(|g| g.covers).collect();
    covered.sort_unstable();
    let mut out = Vec::new();
    let mut at = HEADER.len() as u64;
    for (from, to) in covered.into_iter().chain([(len, len)]) {
        if from > at {
            let mut bytes = vec![0u8; (from.min(len) - at) as usize];
            if catalog.read_exact_at(&mut bytes, at).is_ok() {
                out.extend(groups::records(&bytes, at));
            }
        }
        at = at.max(to);
    }
    out
}

/// The records of members `need` of `g`: one read of the group's range when many are
/// wanted, else one per record. `None` for a record not where the group says (the
/// catalog was rewritten under it) or that does not check out.
fn read_members(catalog: Option<&File>, g: &Group, need: &[usize]) -> Vec<Option<Entry>> {
    let Some(catalog) = catalog else {
        return vec![None; need.len()];
    };
    let found = |bytes: &[u8], at: usize, name: &str| {
        record_at(bytes, at)
            .map(|(e, _)| e)
            .filter(|e| e.name == name)
    };
    if need.len() * 4 > g.members.len() {
        let (from, to) = g.covers;
        let mut bytes = vec![0u8; to.saturating_sub(from) as usize];
        if catalog.read_exact_at(&mut bytes, from).is_ok() {
            return need
                .iter()
                .map(|&mi| {
                    let m = &g.members[mi];
                    let at = m.offset.checked_sub(from)? as usize;
                    found(&bytes, at, &m.name)
                })
                .collect();
        }
    }
    need.iter()
        .map(|&mi| {
            let m = &g.members[mi];
            let mut bytes = vec![0u8; m.len as usize];
            catalog.read_exact_at(&mut bytes, m.offset).ok()?;
            found(&bytes, 0, &m.name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{append, groups, rewrite};
    use crate::meta;
    use rand::{Rng, SeedableRng};
    use tapdeck_filter::{ChunkFilterBuilder, SummaryBuilder};
    use tapdeck_pcap::container::Container;
    use tapdeck_pcap::Format;

    fn udp(src: u32, dst: u32) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend(src.to_be_bytes());
        f.extend(dst.to_be_bytes());
        f.extend([0, 53, 0, 53, 0, 8, 0, 0]);
        f
    }

    /// File `seq` of a store: `n` random hosts (a few files much busier), 10 s each.
    fn entry(seq: u64, rng: &mut impl Rng, hosts: &mut Vec<Vec<u32>>) -> Entry {
        let n: usize = if seq % 17 == 3 {
            3000
        } else {
            rng.gen_range(0..60)
        };
        let mine: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
        let mut b = ChunkFilterBuilder::new();
        let mut s = SummaryBuilder::new();
        for pair in mine.chunks(2) {
            b.add(1, &udp(pair[0], *pair.last().unwrap_or(&pair[0])));
        }
        let (f, v) = b.finish_with_values();
        s.add(&f, &v);
        hosts.push(mine);
        let start = 1_000_000_000_000 + seq * 10_000_000_000;
        Entry {
            name: meta::file_name(start, 0, seq, Format::Pcapng, Container::Zstd),
            size: 1 << 20,
            first_ns: start,
            last_ns: start + 9_000_000_000,
            packets: n.div_ceil(2) as u64,
            summary: if seq % 23 == 5 {
                Vec::new()
            } else {
                s.finish().encode()
            },
        }
    }

    /// For each entry: ruled out (outside, or no match), as the full catalog decides.
    fn decide_full(
        c: &Catalog,
        e: &Entry,
        outside: &dyn Fn(&Entry) -> bool,
        p: &Predicate,
    ) -> bool {
        let e = &c.entries[&e.name];
        outside(e) || e.summary().is_some_and(|s| !p.may_match(&s))
    }

    /// Ruled out by the lookup (an entry it does not know is a file opened: not ruled out).
    fn decide(l: &Lookup, e: &Entry, outside: &dyn Fn(&Entry) -> bool, p: &Predicate) -> bool {
        let Some(k) = l.get(Path::new(&e.name)) else {
            return false;
        };
        outside(&k.entry) || k.no_match || k.entry.summary().is_some_and(|s| !p.may_match(&s))
    }

    fn host(a: u32) -> Predicate {
        Predicate::parse(&format!("host {} and udp", std::net::Ipv4Addr::from(a))).unwrap()
    }

    #[test]
    fn a_lookup_through_groups_decides_as_the_whole_catalog_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut hosts = Vec::new();
        let entries: Vec<Entry> = (0..(2 * groups::GROUP as u64 + 40))
            .map(|i| entry(i, &mut rng, &mut hosts))
            .collect();
        for e in &entries {
            append(dir.path(), std::slice::from_ref(e)).unwrap();
        }
        let (_, gs) = groups::read(dir.path());
        assert_eq!(gs.len(), 2, "two whole groups, the rest past them");
        let full = Catalog::read(dir.path());
        let window =
            |lo: u64, hi: u64| move |e: &Entry| e.packets == 0 || e.last_ns < lo || e.first_ns > hi;
        let all = window(0, u64::MAX);
        let mut settled = 0;
        for (i, e) in entries.iter().enumerate() {
            // A host of this file, and one of no file.
            for a in hosts[i].first().copied().into_iter().chain([rng.gen()]) {
                let p = host(a);
                let l = Lookup::read(dir.path(), &all, Some(&p));
                assert_eq!(l.consulted, entries.len() as u64);
                settled += l.consulted - l.records;
                for other in &entries {
                    assert!(
                        l.get(Path::new(&other.name)).is_some(),
                        "every entry is known"
                    );
                    assert_eq!(
                        decide(&l, other, &all, &p),
                        decide_full(&full, other, &all, &p),
                        "{} for {a:x}",
                        other.name
                    );
                }
                assert!(
                    !decide(&l, e, &all, &p) || hosts[i].first() != Some(&a),
                    "a file holding the host is never ruled out"
                );
            }
        }
        assert!(
            settled > 0,
            "the groups settled entries without their records"
        );
        // A later record of a grouped file (`tapdeck index` wrote it again), here without
        // a summary: the group's record still rules the file out for an absent host (both
        // describe the same packets), and neither does for a host it holds.
        let mut again = entries[3].clone();
        again.summary.clear();
        append(dir.path(), &[again]).unwrap();
        let absent = host(rng.gen());
        let l = Lookup::read(dir.path(), &all, Some(&absent));
        assert_eq!(
            decide(&l, &entries[3], &all, &absent),
            decide_full(&full, &entries[3], &all, &absent)
        );
        let present = host(hosts[3][0]);
        let l = Lookup::read(dir.path(), &all, Some(&present));
        assert!(!decide(&l, &entries[3], &all, &present));
        // A window and a host: groups outside it read no slice, and the answers stay.
        let w = window(entries[200].first_ns, entries[230].last_ns);
        for i in [5, 210, 290] {
            let Some(&a) = hosts[i].first() else { continue };
            let p = host(a);
            let l = Lookup::read(dir.path(), &w, Some(&p));
            assert!(
                l.slices <= 2,
                "only the group the window meets: {}",
                l.slices
            );
            for other in &entries {
                assert_eq!(
                    decide(&l, other, &w, &p),
                    decide_full(&full, other, &w, &p),
                    "{}",
                    other.name
                );
            }
        }
        // A time window alone reads no record of a group.
        let w = window(entries[10].first_ns, entries[12].last_ns);
        let l = Lookup::read(dir.path(), &w, None);
        assert_eq!(l.records, 41, "only those past the groups");
        for e in &entries {
            assert_eq!(w(&l.get(Path::new(&e.name)).unwrap().entry), w(e));
        }
    }

    #[test]
    fn damage_and_a_rewrite_under_the_groups_cost_speed_never_answers() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let mut hosts = Vec::new();
        let entries: Vec<Entry> = (0..(groups::GROUP as u64 + 10))
            .map(|i| entry(i, &mut rng, &mut hosts))
            .collect();
        append(dir.path(), &entries).unwrap();
        let all = |e: &Entry| e.packets == 0;
        let present = |root: &Path| {
            for (i, e) in entries.iter().enumerate() {
                if let Some(&a) = hosts[i].first() {
                    let l = Lookup::read(root, &all, Some(&host(a)));
                    assert!(!decide(&l, e, &all, &host(a)), "{} holds {a:x}", e.name);
                }
            }
        };
        present(dir.path());
        // Every `step`th byte of the file at `path` flipped by `bit`, one at a time.
        let flip_each = |path: &Path, good: &[u8], step: usize, bit: u8| {
            for i in (0..good.len()).step_by(step) {
                let mut b = good.to_vec();
                b[i] ^= bit;
                std::fs::write(path, &b).unwrap();
                present(dir.path());
            }
        };
        let gpath = groups::path(dir.path());
        let good = std::fs::read(&gpath).unwrap();
        // Any byte of the groups flipped (head, footer), or the file cut short.
        flip_each(&gpath, &good, good.len() / 97 + 1, 0x10);
        std::fs::write(&gpath, &good[..good.len() / 2]).unwrap();
        present(dir.path());
        std::fs::write(&gpath, &good).unwrap();
        // Any byte of the slices flipped, or the slices gone.
        let spath = groups::slices_path(dir.path());
        let slices = std::fs::read(&spath).unwrap();
        flip_each(&spath, &slices, slices.len() / 61 + 1, 0x01);
        std::fs::remove_file(&spath).unwrap();
        present(dir.path());
        std::fs::write(&spath, &slices).unwrap();
        // The catalog rewritten (other offsets) under the old groups.
        std::fs::write(&gpath, &good).unwrap();
        let mut reversed = entries.clone();
        reversed.reverse();
        let cat = crate::catalog::path(dir.path());
        let mut bytes = HEADER.to_vec();
        for e in &reversed {
            bytes.extend(e.encode());
        }
        std::fs::write(&cat, &bytes).unwrap();
        present(dir.path());
        // A rewrite makes the groups again, all records in them.
        rewrite(dir.path(), &entries).unwrap();
        let (_, gs) = groups::read(dir.path());
        assert_eq!(
            gs.iter().map(|g| g.members.len()).sum::<usize>(),
            entries.len()
        );
        let l = Lookup::read(dir.path(), &all, None);
        assert_eq!((l.records, l.consulted), (0, entries.len() as u64));
        present(dir.path());
    }
}
