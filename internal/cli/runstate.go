package cli

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

// A run's saved state holds its whole conversation: it is the user's,
// never the agent's. By default it goes under Cove's state directory,
// outside any workspace; one named inside the workspace (--state, or the
// --resume file there) is left out of what is uploaded to the sandbox
// and out of the patch and --out copy at the end.

// newStateFile makes the file a run waiting for approval saves its state
// to when --state names none: DIR/runs/run-TIME-*.json under Cove's state
// directory, readable by its owner only.
func newStateFile(stateDir string) (string, error) {
	dir := filepath.Join(runtimes.DataDir(stateDir), "runs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, time.Now().Format("run-20060102-150405-*.json"))
	if err != nil {
		return "", err
	}
	name := f.Name()
	return name, f.Close()
}

// inWorkspace returns the paths among files that lie inside the
// workspace dir, relative to it and slash-separated ("" files are
// ignored).
func inWorkspace(dir string, files ...string) []string {
	var out []string
	for _, f := range files {
		if f == "" || dir == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(dir, abs)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// writeTarSkipping is tarball.Write of dir without the regular files
// named in skip (relative, slash-separated).
func writeTarSkipping(ctx context.Context, w io.Writer, dir string, skip []string) error {
	if len(skip) == 0 {
		return tarball.Write(ctx, w, dir)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Write(ctx, pw, dir)) }()
	defer pr.Close()
	tr, tw := tar.NewReader(pr), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg && slices.Contains(skip, hdr.Name) {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// keepSkipped copies into final (the workspace as the run left it) the
// files of orig that were kept from the sandbox and still exist, so the
// patch and the --out copy leave them as they are.
func keepSkipped(orig, final string, skip []string) error {
	for _, rel := range skip {
		src := filepath.Join(orig, filepath.FromSlash(rel))
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
			continue
		}
		if err != nil {
			return err
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		root, err := os.OpenRoot(final)
		if err != nil {
			return err
		}
		if _, err := root.Lstat(filepath.FromSlash(rel)); err == nil {
			root.Close()
			continue // the agent made a file of that name: the run's result
		}
		// Through the root: the parent folders are the sandbox's.
		err = root.MkdirAll(filepath.Dir(filepath.FromSlash(rel)), 0o755)
		if err == nil {
			err = root.WriteFile(filepath.FromSlash(rel), b, fi.Mode().Perm())
		}
		root.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
