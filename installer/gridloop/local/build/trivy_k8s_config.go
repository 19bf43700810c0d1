// gridloop's own program, built by `gridloop local build` (installer/gridloop/local/recipes.py)
//
// trivy-k8s-config: `trivy config --format=json --skip-check-update` for Kubernetes
// manifests, and nothing else of Trivy. The scan is Trivy's own: its Kubernetes
// scanner (pkg/iac/scanners/kubernetes) and Rego engine (pkg/iac/rego) with the
// trivy-checks bundle embedded in the module, set up as `trivy config` sets them
// up (pkg/misconf, pkg/commands/artifact); the report has the fields of Trivy's
// JSON report, converted as pkg/misconf, pkg/scan/local and pkg/result do.
// Nothing is downloaded and nothing is cached.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/aquasecurity/trivy/pkg/iac/rego"
	"github.com/aquasecurity/trivy/pkg/iac/scan"
	k8sscanner "github.com/aquasecurity/trivy/pkg/iac/scanners/kubernetes"
	"github.com/aquasecurity/trivy/pkg/iac/scanners/options"
	"github.com/aquasecurity/trivy/pkg/log"
	"github.com/aquasecurity/trivy/pkg/mapfs"
	"github.com/aquasecurity/trivy/pkg/version/app"
)

var severities = []string{"UNKNOWN", "LOW", "MEDIUM", "HIGH", "CRITICAL"}

type causeMetadata struct {
	Resource  string `json:",omitempty"`
	Provider  string `json:",omitempty"`
	Service   string `json:",omitempty"`
	StartLine int    `json:",omitempty"`
	EndLine   int    `json:",omitempty"`
}

type misconfiguration struct {
	Type          string        `json:",omitempty"`
	ID            string        `json:",omitempty"`
	AVDID         string        `json:",omitempty"`
	Title         string        `json:",omitempty"`
	Description   string        `json:",omitempty"`
	Message       string        `json:",omitempty"`
	Namespace     string        `json:",omitempty"`
	Query         string        `json:",omitempty"`
	Resolution    string        `json:",omitempty"`
	Severity      string        `json:",omitempty"`
	PrimaryURL    string        `json:",omitempty"`
	References    []string      `json:",omitempty"`
	Status        string        `json:",omitempty"`
	CauseMetadata causeMetadata `json:",omitzero"`
}

type misconfSummary struct {
	Successes int
	Failures  int
}

type result struct {
	Target            string
	Class             string
	Type              string
	MisconfSummary    *misconfSummary    `json:",omitempty"`
	Misconfigurations []misconfiguration `json:",omitempty"`
}

type report struct {
	SchemaVersion int
	Trivy         struct{ Version string }
	ArtifactName  string
	ArtifactType  string
	Results       []result `json:",omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "trivy-k8s-config: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	flags := flag.NewFlagSet("trivy-k8s-config", flag.ExitOnError)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "usage: trivy-k8s-config [flags] DIR|FILE\n\n"+
			"Trivy %s's misconfiguration scan of Kubernetes manifests, with its "+
			"embedded checks: `trivy config --format=json --skip-check-update`.\n\n",
			app.Version())
		flags.PrintDefaults()
	}
	severity := flags.String("severity", strings.Join(severities, ","),
		"severities of the findings to report")
	nonFailures := flags.Bool("include-non-failures", false, "report passed checks too")
	debug := flags.Bool("debug", false, "debug logging")
	quiet := flags.Bool("quiet", false, "no logging")
	version := flags.Bool("version", false, "print the Trivy version and exit")
	_ = flags.Parse(os.Args[1:])
	if *version {
		fmt.Printf("Version: %s\n", app.Version())
		return nil
	}
	if flags.NArg() != 1 {
		flags.Usage()
		os.Exit(2)
	}
	wanted := strings.Split(*severity, ",")
	for _, s := range wanted {
		if !slices.Contains(severities, s) {
			return fmt.Errorf("unknown severity %q (one of %s)", s, strings.Join(severities, ","))
		}
	}
	level := slog.LevelWarn
	if *debug {
		level = slog.LevelDebug
	}
	if !*quiet {
		slog.SetDefault(log.New(log.NewHandler(os.Stderr, &log.Options{Level: level})))
	}

	target := flags.Arg(0)
	fsys, err := kubernetesFiles(target)
	if err != nil {
		return err
	}
	rs, err := regoScanner()
	if err != nil {
		return err
	}
	scanner := k8sscanner.NewScanner(rego.WithRegoScanner(rs), options.WithScanRawConfig(false))
	results, err := scanner.ScanFS(context.Background(), fsys, ".")
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}

	out := report{SchemaVersion: 2, ArtifactName: target, ArtifactType: "filesystem"}
	out.Trivy.Version = app.Version()
	out.Results = toResults(scanner.Name(), results, wanted, *nonFailures)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// regoScanner: the embedded checks and libraries, as misconf.InitRegoScanner loads them
// for `trivy config --skip-check-update` when no check bundle was downloaded.
func regoScanner() (*rego.Scanner, error) {
	data := mapfs.New()
	if err := data.MkdirAll("system", 0o700); err != nil {
		return nil, err
	}
	// misconf.CreateDataFS, with --k8s-version unset
	k8sVersion := []byte(`{"k8s": {"version": ""}}`)
	if err := data.WriteVirtualFile("system/k8s-version.json", k8sVersion, 0o600); err != nil {
		return nil, err
	}
	rs := rego.NewScanner(
		rego.WithEmbeddedPolicies(true),
		rego.WithEmbeddedLibraries(true),
		rego.WithIncludeDeprecatedChecks(false),
		rego.WithTrivyVersion(app.Version()),
		rego.WithMaxAllowedErrors(rego.DefaultAllowedRegoErrors),
		rego.WithDataDirs("."),
		rego.WithDataFilesystem(data),
		rego.WithCustomSchemas(map[string][]byte{}),
		rego.WithPolicyNamespaces(rego.BuiltinNamespaces()...),
	)
	if err := rs.LoadPolicies(nil); err != nil {
		return nil, fmt.Errorf("load checks: %w", err)
	}
	return rs, nil
}

// kubernetesFiles: the Kubernetes manifests in target (a folder, or one file), as Trivy's
// filesystem walker (which skips .git) and its Kubernetes config analyzer find them.
func kubernetesFiles(target string) (fs.FS, error) {
	root, err := filepath.Abs(target)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	files := mapfs.New()
	add := func(path, rel string) error {
		if !isKubernetes(path) {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if dir := filepath.Dir(rel); dir != "." {
			if err := files.MkdirAll(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return files.WriteFile(rel, path)
	}
	if !info.IsDir() {
		return files, add(root, filepath.Base(root))
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return add(path, rel)
	})
	return files, err
}

// isKubernetes is detection.IsType(path, r, detection.FileTypeKubernetes): a .yaml, .yml
// or .json file with a document that has apiVersion, kind and metadata. That package is
// not imported: it links Terraform's module fetcher, and with it every cloud SDK.
func isKubernetes(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".yaml" && ext != ".yml" && ext != ".json" {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	isObject := func(doc map[string]any) bool {
		for _, key := range []string{"apiVersion", "kind", "metadata"} {
			if _, ok := doc[key]; !ok {
				return false
			}
		}
		return true
	}
	if ext == ".json" {
		var doc map[string]any
		return json.Unmarshal(data, &doc) == nil && isObject(doc)
	}
	var first any
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&first) != nil {
		return false
	}
	marker := []byte("\n---\n")
	if crlf := []byte("\r\n---\r\n"); bytes.Contains(data, crlf) {
		marker = crlf
	}
	for part := range bytes.SplitSeq(data, marker) {
		var doc map[string]any
		if yaml.Unmarshal(part, &doc) == nil && isObject(doc) {
			return true
		}
	}
	return false
}

// toResults: misconf.ResultsToMisconf, then local.Service.MisconfsToResults and
// result.filterMisconfigurations (severities; failures only unless nonFailures).
func toResults(scanner string, results scan.Results, wanted []string, nonFailures bool) []result {
	failed, passed := map[string][]misconfiguration{}, map[string][]misconfiguration{}
	for _, res := range results {
		flat := res.Flatten()
		file := filepath.ToSlash(flat.Location.Filename)
		switch res.Status() {
		case scan.StatusFailed:
			failed[file] = append(failed[file], detected(scanner, res, flat, "FAIL"))
		case scan.StatusPassed:
			passed[file] = append(passed[file], detected(scanner, res, flat, "PASS"))
		}
	}
	var out []result
	for file := range joinKeys(failed, passed) {
		r := result{Target: file, Class: "config", Type: "kubernetes"}
		summary := misconfSummary{}
		for _, m := range slices.Concat(sorted(failed[file]), sorted(passed[file])) {
			if !slices.Contains(wanted, m.Severity) {
				continue
			}
			if m.Status == "FAIL" {
				summary.Failures++
			} else {
				summary.Successes++
			}
			if m.Status == "FAIL" || nonFailures {
				r.Misconfigurations = append(r.Misconfigurations, m)
			}
		}
		if summary != (misconfSummary{}) {
			r.MisconfSummary = &summary
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}

func joinKeys(a, b map[string][]misconfiguration) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// detected: a check's result as pkg/scan/local's toDetectedMisconfiguration gives it.
func detected(
	scanner string, res scan.Result, flat scan.FlatResult, status string,
) misconfiguration {
	rule := res.Rule()
	sev := string(flat.Severity)
	if !slices.Contains(severities, sev) {
		sev = map[string]string{"FAIL": "CRITICAL", "PASS": "UNKNOWN"}[status]
	}
	msg := strings.TrimSpace(flat.Description)
	if msg == "" {
		msg = "No issues found"
	}
	m := misconfiguration{
		Type:        scanner + " Security Check",
		ID:          rule.ID,
		AVDID:       rule.AVDID,
		Title:       rule.Summary,
		Description: rule.Explanation,
		Message:     msg,
		Namespace:   res.RegoNamespace(),
		Query:       fmt.Sprintf("data.%s.%s", res.RegoNamespace(), res.RegoRule()),
		Resolution:  flat.Resolution,
		Severity:    sev,
		References:  slices.Clone(flat.Links),
		Status:      status,
		CauseMetadata: causeMetadata{
			Resource:  flat.Resource,
			Provider:  flat.RuleProvider.DisplayName(),
			Service:   flat.RuleService,
			StartLine: flat.Location.StartLine,
			EndLine:   flat.Location.EndLine,
		},
	}
	if m.Namespace == "" || rego.IsBuiltinNamespace(m.Namespace) {
		m.PrimaryURL = "https://avd.aquasec.com/misconfig/" + strings.ToLower(m.ID)
		m.References = append(m.References, m.PrimaryURL)
	} else if len(m.References) > 0 {
		m.PrimaryURL = m.References[0]
	}
	return m
}

// sorted: types.ToMisconfigurations' de-duplication, in MisconfResults' order.
func sorted(found []misconfiguration) []misconfiguration {
	seen, unique := map[string]bool{}, []misconfiguration{}
	for _, m := range found {
		key := fmt.Sprintf("%s|%s|%s|%v", m.ID, m.Namespace, m.Message, m.CauseMetadata)
		if !seen[key] {
			seen[key] = true
			unique = append(unique, m)
		}
	}
	sort.SliceStable(unique, func(i, j int) bool {
		a, b := unique[i], unique[j]
		switch {
		case a.Type != b.Type:
			return a.Type < b.Type
		case a.AVDID != b.AVDID:
			return a.AVDID < b.AVDID
		case a.ID != b.ID:
			return a.ID < b.ID
		case a.Severity != b.Severity:
			return a.Severity < b.Severity
		case a.CauseMetadata.Resource != b.CauseMetadata.Resource:
			return a.CauseMetadata.Resource < b.CauseMetadata.Resource
		}
		return a.Message < b.Message
	})
	return unique
}
