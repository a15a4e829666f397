package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cove-sandbox/cove/sandbox"
)

// maxSymlinks bounds symlink hops during resolution, as the kernel's
// MAXSYMLINKS.
const maxSymlinks = 40

// resolve maps p (absolute in the sandbox, or relative to the workdir) to
// the sandbox path it names and the host path under Root, following
// symlinks on the way and the final one too when follow is set. A symlink
// that leads outside Root, "..", a NUL byte or an over-long name gives an
// error wrapping sandbox.ErrInvalid. Missing components are fine: the
// result is where they would be created.
func (s *Server) resolve(p string, follow bool) (sandboxPath, hostPath string, err error) {
	if p == "" {
		p = "."
	}
	if !path.IsAbs(p) {
		p = s.cfg.Workdir + "/" + p
	}
	sp, err := sandbox.ResolvePath("/", p)
	if err != nil {
		return "", "", err
	}
	root := s.cfg.Root
	rest := splitPath(sp)
	cur := root
	hops := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				cur = filepath.Join(append([]string{next}, rest...)...)
				break
			}
			return "", "", fmt.Errorf("resolving %q: %w", p, mapOSError(unwrapOS(err)))
		}
		if fi.Mode()&fs.ModeSymlink == 0 || (len(rest) == 0 && !follow) {
			cur = next
			continue
		}
		hops++
		if hops > maxSymlinks {
			return "", "", fmt.Errorf("resolving %q: too many levels of symbolic links: %w", p, sandbox.ErrInvalid)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", "", fmt.Errorf("reading symlink %q: %w", p, mapOSError(unwrapOS(err)))
		}
		var dest string
		if filepath.IsAbs(target) {
			dest = filepath.Clean(target)
		} else {
			dest = filepath.Join(cur, target)
		}
		if !sandbox.Within(root, dest) {
			return "", "", fmt.Errorf("path %q goes through symlink %q, which points to %q outside the sandbox: %w",
				p, toSandbox(root, next), target, sandbox.ErrInvalid)
		}
		// Walk the target again from the root: it may hold symlinks too.
		rest = append(splitPath(toSandbox(root, dest)), rest...)
		cur = root
	}
	return toSandbox(root, cur), cur, nil
}

// toSandbox turns a host path under root into its sandbox path.
func toSandbox(root, host string) string {
	rel, err := filepath.Rel(root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// mapOSError wraps an OS error with the matching sandbox sentinel so
// errors.Is works and the wire code is right.
func mapOSError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", sandbox.ErrNotFound, err)
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %w", sandbox.ErrExist, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", sandbox.ErrPermission, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("%w: the sandbox's disk is full; free space or raise its disk limit: %w", sandbox.ErrLimit, err)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EXDEV):
		return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	}
	return err
}

// ConfineHeader, a Cove extension, narrows a request's paths to a
// directory of the sandbox (the workspace): the sandbox.Session contract
// confines every path to the workspace, symlinks included, while envd's
// clients may reach the whole sandbox.
const ConfineHeader = "X-Cove-Confine"

type confineKey struct{}

// withConfine reads ConfineHeader into the request's context.
func withConfine(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get(ConfineHeader); c != "" {
			root, err := sandbox.ResolvePath("/", c)
			if err != nil || !path.IsAbs(c) {
				writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("%s header %q: want an absolute sandbox path", ConfineHeader, c))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), confineKey{}, root))
		}
		h.ServeHTTP(w, r)
	})
}

// resolveCtx is resolve plus the request's confinement: the result, after
// symlinks, must lie within the confined directory.
func (s *Server) resolveCtx(ctx context.Context, p string, follow bool) (sandboxPath, hostPath string, err error) {
	confine, _ := ctx.Value(confineKey{}).(string)
	if confine != "" && !path.IsAbs(p) {
		p = confine + "/" + p
	}
	sp, hp, err := s.resolve(p, follow)
	if err != nil {
		return "", "", err
	}
	if confine != "" && !sandbox.Within(confine, sp) {
		return "", "", fmt.Errorf("path %q leads to %q, outside %s: %w", p, sp, confine, sandbox.ErrInvalid)
	}
	return sp, hp, nil
}
