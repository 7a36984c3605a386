package deploycheck

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Layout writes to dst the Docker build context faas-cli build (or publish, or build --shrinkwrap)
// creates for function name of stack s, as faas-cli's CreateBuildContext does: the files of
// template/<lang> at dst, the handler folder's entries (except build and template) under
// dst/function, and each configuration.copy path at dst/function/<path>. Paths are relative to root,
// the folder of stack.yml; a copy path outside root, or root itself, is an error as in faas-cli.
func Layout(root string, s *Stack, name, dst string) error {
	fn, ok := s.Functions[name]
	if !ok {
		return fmt.Errorf("stack: no function %q", name)
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	handlerDst := filepath.Join(dst, "function")
	if err := os.MkdirAll(handlerDst, 0o755); err != nil {
		return err
	}
	if strings.ToLower(fn.Lang) == "dockerfile" {
		return fmt.Errorf("%s: lang dockerfile is not used by flagdown", name)
	}
	tmpl := filepath.Join(root, "template", fn.Lang)
	if _, err := os.Stat(filepath.Join(tmpl, "template.yml")); err != nil {
		return fmt.Errorf("%s: template %s: %w", name, fn.Lang, err)
	}
	if err := copyTree(tmpl, dst); err != nil {
		return err
	}
	handler := filepath.Join(root, filepath.FromSlash(fn.Handler))
	entries, err := os.ReadDir(handler)
	if err != nil {
		return fmt.Errorf("%s: handler: %w", name, err)
	}
	for _, e := range entries {
		if e.Name() == "build" || e.Name() == "template" {
			continue
		}
		if err := copyTree(filepath.Join(handler, e.Name()), filepath.Join(handlerDst, e.Name())); err != nil {
			return err
		}
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	for _, p := range s.Configuration.Copy {
		abs, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		if abs == absRoot || !strings.HasPrefix(abs, absRoot+string(filepath.Separator)) {
			return fmt.Errorf("configuration.copy %q: outside the project or the whole project", p)
		}
		if err := copyTree(abs, filepath.Join(handlerDst, filepath.FromSlash(p))); err != nil {
			return fmt.Errorf("configuration.copy %q: %w", p, err)
		}
	}
	return nil
}

// Build runs the template's build step in the build context dir (sh build.sh out), as its
// Dockerfile does, with env added to the process environment. out should be an absolute path.
func Build(dir, out string, env []string, stdout, stderr io.Writer) error {
	cmd := exec.Command("sh", "./build.sh", out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build.sh in %s: %w", dir, err)
	}
	return nil
}

// OfflineEnv is the environment Build gets for an offline check: modules only from the local
// module cache, no workspace, no cgo. The template's build.sh passes -mod=readonly explicitly, so an
// incomplete go.sum still fails as it would in the image build.
var OfflineEnv = []string{"GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0"}

// copyTree copies the file or folder src to dst, keeping file modes.
func copyTree(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
