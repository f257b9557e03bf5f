//! The library's modules form layers, and no import goes up a layer or
//! round in a circle (src/lib.rs draws them):
//!
//! ```text
//! leaves   registry, request, reply, command, config, ... (pure, or one job's I/O)
//! state    the running configuration, client table, counters, clock
//! core     the task that owns the registry, the log and the token ceiling;
//!          cluster mode's core (the replicated registry, its bus)
//! views    info, metrics
//! edges    connection, server
//! ```
//!
//! Read from the sources: every `crate::<module>` a file of a top-level
//! module names, outside comments and tests (a `tests.rs`, or what follows
//! `#[cfg(test)]`), is an edge from that module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module's layer; a module missing here fails the test,
/// so a new one must be placed.
const LAYERS: &[(&str, usize)] = &[
    ("aof", 0),
    ("ceiling", 0),
    ("command", 0),
    ("config", 0),
    ("glob", 0),
    ("histogram", 0),
    ("logging", 0),
    ("monitor", 0),
    ("number", 0),
    ("pubsub", 0),
    ("registry", 0),
    ("reply", 0),
    ("request", 0),
    ("slowlog", 0),
    ("splitargs", 0),
    ("system", 0),
    ("tls", 0),
    ("warnings", 0),
    ("state", 1),
    ("core", 2),
    ("cluster", 2),
    ("info", 3),
    ("metrics", 3),
    ("connection", 4),
    ("server", 4),
];

const LAYER_NAMES: [&str; 5] = ["leaves", "state", "core", "views", "edges"];

#[test]
fn no_module_imports_one_above_it_or_round_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    let layer = |module: &str| {
        LAYERS
            .iter()
            .find(|(name, _)| *name == module)
            .map(|(_, layer)| *layer)
            .unwrap_or_else(|| panic!("src/{module} is in no layer: add it to LAYERS"))
    };
    for (module, uses) in &graph {
        for used in uses {
            assert!(
                layer(used) <= layer(module),
                "{module} ({}) imports {used} ({}), a layer above it",
                LAYER_NAMES[layer(module)],
                LAYER_NAMES[layer(used)]
            );
        }
    }
    if let Some(circle) = find_cycle(&graph) {
        panic!(
            "modules import each other in a circle: {}",
            circle.join(" -> ")
        );
    }
    // The check sees the edges it should: a known one, and none reversed.
    assert!(graph["connection"].contains("core"));
    assert!(!graph["core"].contains("connection"));
}

/// Each top-level module (a file `src/x.rs` or a directory `src/x/`) and
/// the other top-level modules its files name.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if name == "lib" || name == "main" {
            continue;
        }
        let mut uses = BTreeSet::new();
        for file in rust_files(&path) {
            if file.file_name().is_some_and(|name| name == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let production = text
                .lines()
                .take_while(|line| line.trim() != "#[cfg(test)]");
            for line in production {
                let code = line.split("//").next().unwrap_or("");
                for (at, _) in code.match_indices("crate::") {
                    let rest = &code[at + "crate::".len()..];
                    let used: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !used.is_empty() && used != name {
                        uses.insert(used);
                    }
                }
            }
        }
        // A module may be a file and a directory of its submodules
        // (`metrics.rs` and `metrics/`): one module.
        graph.entry(name).or_insert_with(BTreeSet::new).extend(uses);
    }
    graph
}

fn rust_files(path: &Path) -> Vec<std::path::PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        files.extend(rust_files(&entry.unwrap().path()));
    }
    files
}

/// A circle of imports, if there is one: a depth-first search that meets a
/// module still on its path.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for used in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(used, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}
