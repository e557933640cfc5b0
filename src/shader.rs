//! A small WGSL preprocessor: `#import`, `#ifdef`/`#ifndef`/`#if`/`#else`/`#endif`.
//!
//! WGSL has no `#` token, so any line whose first non-blank character is `#` is a
//! directive. (A line inside a `/* */` comment that starts with `#` is one too: the
//! preprocessor does not parse WGSL.) Everything else is copied verbatim.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// Named WGSL sources a shader may `#import`: static files plus generated text.
#[derive(Debug, Clone, Default)]
pub(crate) struct Modules<'a> {
    /// Module name to its unpreprocessed WGSL text.
    sources: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
}

impl<'a> Modules<'a> {
    /// Builds the set from `(name, text)` pairs, typically `include_str!`ed files.
    pub(crate) fn new(statics: &[(&'a str, &'a str)]) -> Self {
        let sources = statics.iter().map(|&(name, text)| (Cow::Borrowed(name), Cow::Borrowed(text))).collect();
        Self { sources }
    }

    /// Adds (or replaces, so generated code can override a static default) one module.
    pub(crate) fn insert(&mut self, name: impl Into<Cow<'a, str>>, text: impl Into<Cow<'a, str>>) -> &mut Self {
        self.sources.insert(name.into(), text.into());
        self
    }

    /// The raw text of module `name`, if there is one.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.sources.get(name).map(|text| &**text)
    }
}

/// Expands module `entry` of `modules` into plain WGSL under the given `defines`.
///
/// Each module is inserted at most once per output (later `#import`s of it are
/// skipped), indented by the whitespace before its `#import` (blank lines stay
/// empty). Errors name the module and 1-based line at fault.
pub(crate) fn preprocess(entry: &str, modules: &Modules, defines: &BTreeSet<&str>) -> Result<String, String> {
    let mut expander = Expander { modules, defines, imported: BTreeSet::new(), stack: Vec::new() };
    let text = modules.get(entry).ok_or_else(|| format!("unknown entry module `{entry}`"))?;
    let mut out = String::with_capacity(text.len());
    expander.expand(entry, text, "", &mut out)?;
    Ok(out)
}

/// State shared across the recursive expansion of one output.
struct Expander<'m, 'a, 'd> {
    /// Where `#import` looks names up.
    modules: &'m Modules<'a>,
    /// Names that `#ifdef` treats as defined.
    defines: &'d BTreeSet<&'d str>,
    /// Modules already inserted into this output, for once-only imports.
    imported: BTreeSet<String>,
    /// Modules being expanded right now, outermost first, to detect cycles.
    stack: Vec<String>,
}

/// One open `#ifdef`/`#ifndef`/`#if` block.
struct Conditional {
    /// 1-based line of the opening directive, for "unterminated" errors.
    line: usize,
    /// Whether the enclosing code is emitted at all.
    outer_active: bool,
    /// Whether the condition held.
    condition: bool,
    /// Whether `#else` has been seen (it flips which branch is emitted).
    in_else: bool,
}

impl Conditional {
    /// Whether lines at this point of the block are emitted.
    const fn active(&self) -> bool {
        self.outer_active && (self.condition != self.in_else)
    }
}

impl Expander<'_, '_, '_> {
    /// Appends module `name` (whose raw source is `text`) to `out`, each line prefixed by `indent`.
    fn expand(&mut self, name: &str, text: &str, indent: &str, out: &mut String) -> Result<(), String> {
        self.imported.insert(name.to_owned());
        self.stack.push(name.to_owned());
        let mut open: Vec<Conditional> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let at = |message: String| format!("module `{name}` line {number}: {message}");
            let active = open.last().is_none_or(Conditional::active);
            let trimmed = line.trim_start();
            let Some(directive) = trimmed.strip_prefix('#') else {
                if active {
                    if !line.is_empty() {
                        out.push_str(indent);
                        out.push_str(line);
                    }
                    out.push('\n');
                }
                continue;
            };
            let mut words = directive.split_whitespace();
            let keyword = words.next().unwrap_or("");
            let argument = words.next();
            let arity = usize::from(argument.is_some()) + words.count();
            let expected = match keyword {
                "import" | "ifdef" | "ifndef" | "if" => 1,
                "else" | "endif" => 0,
                _ => return Err(at(format!("unknown directive `{}`", trimmed.trim_end()))),
            };
            if arity != expected {
                return Err(at(format!("`#{keyword}` takes {expected} argument(s), got {arity}")));
            }
            match (keyword, argument) {
                ("ifdef" | "if" | "ifndef", Some(define)) => open.push(Conditional {
                    line: number,
                    outer_active: active,
                    condition: self.defines.contains(define) == (keyword != "ifndef"),
                    in_else: false,
                }),
                ("else", _) => match open.last_mut() {
                    Some(block) if !block.in_else => block.in_else = true,
                    Some(_) => return Err(at("second `#else` in one block".into())),
                    None => return Err(at("`#else` without `#ifdef`".into())),
                },
                ("endif", _) => {
                    open.pop().ok_or_else(|| at("`#endif` without `#ifdef`".into()))?;
                }
                // Imports inside an inactive branch are neither checked nor performed.
                ("import", Some(module)) if active => {
                    if self.stack.iter().any(|open| open == module) {
                        let chain = self.stack.join(" -> ");
                        return Err(at(format!("import cycle {chain} -> {module}")));
                    }
                    if self.imported.contains(module) {
                        continue;
                    }
                    let source = self.modules.get(module).ok_or_else(|| at(format!("unknown module `{module}`")))?;
                    let nested = format!("{indent}{}", &line[..line.len() - trimmed.len()]);
                    self.expand(module, source, &nested, out)?;
                }
                _ => {}
            }
        }
        if let Some(block) = open.last() {
            return Err(format!("module `{name}` line {}: `#ifdef` without `#endif`", block.line));
        }
        self.stack.pop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of directive handling and error reporting.

    use super::*;

    /// Preprocesses `entry` of the static `modules` with `defines`.
    fn run(entry: &str, modules: &[(&str, &str)], defines: &[&str]) -> Result<String, String> {
        preprocess(entry, &Modules::new(modules), &defines.iter().copied().collect())
    }

    /// Generated code lands at the depth of its `#import`; blank lines get no trailing spaces.
    #[test]
    fn import_is_indented_by_the_directive() {
        let mut modules = Modules::new(&[("main", "fn f() {\n    #import body\n}\n")]);
        modules.insert("body", String::from("let a = 1;\n\nlet b = a;\n"));
        let out = preprocess("main", &modules, &BTreeSet::new()).unwrap();
        assert_eq!(out, "fn f() {\n    let a = 1;\n\n    let b = a;\n}\n");
    }

    /// An import inside an indented import is indented by both.
    #[test]
    fn nested_imports_accumulate_indentation() {
        let modules = [("main", "  #import a\n"), ("a", "x\n  #import b\n"), ("b", "y\n")];
        assert_eq!(run("main", &modules, &[]).unwrap(), "  x\n    y\n");
    }

    /// Conditionals nest, and an inner block of an inactive branch stays inactive.
    #[test]
    fn nested_ifdef_else() {
        let source =
            "#ifdef A\na\n#ifndef B\nnot_b\n#else\nb\n#endif\n#else\nnot_a\n#if A\nhidden\n#endif\n#endif\nend\n";
        let modules = [("main", source)];
        assert_eq!(run("main", &modules, &["A"]).unwrap(), "a\nnot_b\nend\n");
        assert_eq!(run("main", &modules, &["A", "B"]).unwrap(), "a\nb\nend\n");
        assert_eq!(run("main", &modules, &["B"]).unwrap(), "not_a\nend\n");
    }

    /// Later imports of an already inserted module, direct or nested, are skipped.
    #[test]
    fn module_is_imported_once() {
        let modules = [("main", "#import a\n#import b\n#import a\n"), ("a", "a\n"), ("b", "#import a\nb\n")];
        assert_eq!(run("main", &modules, &[]).unwrap(), "a\nb\n");
    }

    /// A cycle is reported at the importing line, with the chain.
    #[test]
    fn import_cycle_is_an_error() {
        let modules = [("main", "#import a\n"), ("a", "x\n#import main\n")];
        let error = run("main", &modules, &[]).unwrap_err();
        assert!(error.contains("module `a` line 2") && error.contains("main -> a -> main"), "{error}");
    }

    /// Unknown imported and entry modules are reported by name.
    #[test]
    fn unknown_module_is_an_error() {
        let error = run("main", &[("main", "x\n  #import nowhere\n")], &[]).unwrap_err();
        assert!(error.contains("module `main` line 2") && error.contains("`nowhere`"), "{error}");
        assert!(run("missing", &[], &[]).unwrap_err().contains("`missing`"));
    }

    /// Stray `#endif`, double `#else` and unterminated `#ifdef` name their line.
    #[test]
    fn unbalanced_conditionals_are_errors() {
        let error = run("main", &[("main", "x\n#endif\n")], &[]).unwrap_err();
        assert!(error.contains("module `main` line 2"), "{error}");
        let error = run("main", &[("main", "#ifdef A\n#else\n#else\n#endif\n")], &[]).unwrap_err();
        assert!(error.contains("line 3"), "{error}");
        let error = run("main", &[("main", "#import a\n"), ("a", "\n#ifdef A\n")], &[]).unwrap_err();
        assert!(error.contains("module `a` line 2") && error.contains("without `#endif`"), "{error}");
    }

    /// Unknown directives and wrong argument counts name their line.
    #[test]
    fn unknown_or_malformed_directive_is_an_error() {
        let error = run("main", &[("main", "x\n#define A\n")], &[]).unwrap_err();
        assert!(error.contains("module `main` line 2") && error.contains("#define A"), "{error}");
        let error = run("main", &[("main", "#ifdef A B\n#endif\n")], &[]).unwrap_err();
        assert!(error.contains("line 1"), "{error}");
    }

    /// Imports in a dropped branch are neither resolved nor counted as done.
    #[test]
    fn inactive_branch_import_is_not_performed() {
        let modules = [("main", "#ifdef A\n#import nowhere\n#import a\n#endif\n#import a\n"), ("a", "a\n")];
        assert_eq!(run("main", &modules, &[]).unwrap(), "a\n");
    }
}
