// sift help-markdown: the reference pages of docs/reference/, generated from the definitions the
// program itself uses, so that they cannot drift from it: every subcommand's flags from the CLI11
// tree (`sift help-markdown`, docs/reference/cli.md) and every job spec key with its type, range,
// default and meaning from the parser's table (`--job-spec`, docs/reference/job-spec.md). Output
// depends on the build (a SIFT_MINIMAL build has fewer commands) but not on the machine: defaults
// that depend on the machine are described in words by their flags. `make docs` writes both
// pages; the docs test regenerates them and fails on a difference.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "common/job_spec.h"

namespace sift::cli {
namespace {

// A table cell: pipes escaped, line breaks as spaces.
std::string Cell(const std::string& s) {
  return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\n", " "}});
}

// "sift data gen" for the subcommand `app`.
std::string FullName(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent()) {
    names.push_back(a->get_parent() == nullptr ? std::string("sift") : a->get_name());
  }
  std::reverse(names.begin(), names.end());
  return absl::StrJoin(names, " ");
}

bool Hidden(const CLI::App* app) { return app->get_group().empty(); }

// The subcommands of `app` that users see, in the order they were added.
std::vector<CLI::App*> VisibleSubcommands(CLI::App* app) {
  return app->get_subcommands([](CLI::App* sub) { return !Hidden(sub); });
}

void AppendCommand(CLI::App* app, std::string* out) {
  const std::vector<CLI::App*> subs = VisibleSubcommands(app);
  absl::StrAppend(out, "\n## ", FullName(app), "\n\n", app->get_description(), "\n");
  if (!subs.empty()) {
    absl::StrAppend(out, "\n| subcommand | what |\n|---|---|\n");
    for (CLI::App* sub : subs) {
      const std::string name = FullName(sub);
      absl::StrAppend(out, "| [", name, "](#", absl::StrReplaceAll(name, {{" ", "-"}}), ") | ",
                      Cell(sub->get_description()), " |\n");
    }
  }
  std::vector<std::string> positionals;
  std::string rows;
  for (const CLI::Option* opt : app->get_options()) {
    const std::string names = opt->get_name(false, true);
    if (names == "-h,--help" || names == "--help" || names == "--version") continue;
    if (opt->get_group().empty()) continue;  // hidden from --help (tests' fault injection)
    if (opt->get_positional() && opt->nonpositional() == false) {
      positionals.push_back(
          absl::StrCat(opt->get_name(true, false), opt->get_required() ? "" : " (optional)"));
    }
    std::string flag = opt->get_positional() && !opt->nonpositional()
                           ? opt->get_name(true, false)
                           : absl::StrReplaceAll(names, {{",", ", "}});
    if (opt->get_type_size() != 0 && !opt->get_type_name().empty()) {
      absl::StrAppend(&flag, " ", opt->get_type_name());
    }
    std::string notes;
    if (opt->get_required()) notes = "required";
    if (!opt->get_envname().empty()) {
      absl::StrAppend(&notes, notes.empty() ? "" : "; ", "env `", opt->get_envname(), "`");
    }
    const std::string def = opt->get_default_str();
    absl::StrAppend(&rows, "| `", Cell(flag), "` | ",
                    def.empty() ? "" : absl::StrCat("`", Cell(def), "`"), " | ",
                    Cell(opt->get_description()),
                    notes.empty() ? "" : absl::StrCat(" (", notes, ")"), " |\n");
  }
  if (subs.empty() || !rows.empty()) {
    absl::StrAppend(out, "\nUsage: `", FullName(app), rows.empty() ? "" : " [OPTIONS]",
                    positionals.empty() ? "" : absl::StrCat(" ", absl::StrJoin(positionals, " ")),
                    "`\n");
  }
  if (!rows.empty()) {
    absl::StrAppend(out, "\n| option | default | meaning |\n|---|---|---|\n", rows);
  }
  for (CLI::App* sub : subs) AppendCommand(sub, out);
}

std::string CliReference(CLI::App* root) {
  std::string out =
      "# Command-line reference\n\n"
      "Every `sift` subcommand and its options, generated from the program's own definitions by "
      "`sift help-markdown` (`make docs` rewrites this page; `make test` fails when it is out of "
      "date). `sift <command> --help` prints the same. Exit codes: 0 success, 1 failure, 2 a "
      "usage error; job commands add theirs (see their descriptions).\n";
  AppendCommand(root, &out);
  return out;
}

std::string JobSpecReference() {
  std::string out =
      "# Job spec reference\n\n"
      "Every key of a job spec (the YAML file `sift submit SPEC` and `sift local SPEC` take), "
      "generated from the parser's own table by `sift help-markdown --job-spec` (`make docs` "
      "rewrites this page; `make test` fails when it is out of date). Parsing is strict: an "
      "unknown key, a duplicate, a wrong type or a value out of range is an error naming the "
      "file, line and key. `sift submit --dry-run job.yaml` checks a spec and prints it with "
      "every default filled in.\n\n"
      "Only `dataset` is required:\n\n"
      "```yaml\n"
      "dataset: /data/tiny\n"
      "model: {type: sim}\n"
      "training: {epochs: 3, batch_size: 2048}\n"
      "cluster: {servers: 2, workers: 1}\n"
      "```\n";
  std::string section;
  for (const JobSpecFieldDoc& d : DescribeJobSpec()) {
    const bool top = d.field.find('.') == std::string::npos;
    if (top) {
      absl::StrAppend(&out, "\n## ", d.field, "\n\n", d.doc, "\n");
      if (d.kind != "mapping") {
        absl::StrAppend(&out, "\n- type: ", d.kind, "\n");
        const bool required = d.kind.find("(required)") != std::string::npos;
        if (!d.default_value.empty() && !required) {
          absl::StrAppend(&out, "- default: `", d.default_value, "`\n");
        }
      }
      continue;
    }
    if (d.kind == "mapping") continue;  // tables.<name>: its one key below says it
    absl::StrAppend(&out, "\n### ", d.field, "\n\n", d.doc, "\n\n- type: ", d.kind, "\n");
    if (!d.default_value.empty()) absl::StrAppend(&out, "- default: `", d.default_value, "`\n");
  }
  return out;
}

struct HelpMarkdownFlags {
  bool job_spec = false;
  std::string out;
};

Status RunHelpMarkdown(CLI::App* root, const HelpMarkdownFlags& f) {
  const std::string text = f.job_spec ? JobSpecReference() : CliReference(root);
  if (f.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return absl::OkStatus();
  }
  return WriteFileAtomic(f.out, text);
}

}  // namespace

void AddHelpMarkdown(CLI::App* app, Action* action) {
  auto flags = std::make_shared<HelpMarkdownFlags>();
  CLI::App* cmd = app->add_subcommand(
      "help-markdown", "Print the command-line reference (or the job spec's) as Markdown");
  cmd->group("");  // for docs/reference/, not listed in --help
  cmd->add_flag("--job-spec", flags->job_spec, "The job spec reference instead of the CLI's");
  cmd->add_option("--out", flags->out, "Write it to this file (atomically) instead of stdout");
  cmd->callback(
      [app, flags, action] { *action = [app, flags] { return RunHelpMarkdown(app, *flags); }; });
}

}  // namespace sift::cli
