package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/seqmapfile"
	"github.com/kinflow/kinflow/internal/store"
)

// A method's program runs on a job-private view of the media root, never
// on the shared cache itself. The reference's programs were written for a
// deployment that ran one job at a time, and several delete or rewrite the
// cached files they read (method F deletes its esm1v files after a run by
// default and always on failure, method G deletes its embeddings by
// default, method I always deletes what it touched). Under kinflow many
// jobs plan on the same files at once, so such a program must never reach
// them: every path the command engine gives it that points into the media
// root renders to the stage's view (methods.ViewVars), which holds
//
//   - sequence_info/<family>/<file>: a symbolic link to each file of the
//     stage's plan for the sequences sent to the program (a copy where no
//     link can be made), so that a program deleting or renaming "its"
//     files removes only links;
//   - a link to each such family folder's manifest.json and to method A's
//     binding-site table (sharedExtras);
//   - sequence_info/seqmap.sqlite3: a private database with the stage's
//     rows (SQLite's -wal and -shm files go by path, so a shared database
//     reached through a link would be unsafe).
//
// Symbolic, not hard links: a hard link changes the shared file's inode
// (its link count, and so its inode change time), which is what the
// integrity records trust; every stage linking a file would make it look
// changed to every other job's check. A symbolic link leaves the shared
// file as it is.
//
// A link still lets a program that opens a file for writing change the
// shared file. After the run every shared file the view linked is stat'ed
// again: one whose inode is the same but whose size, modification time or
// inode change time moved was written in place by the program (no kinflow
// writer touches a cached file in place; they write a new file and rename
// it), and one that vanished or was replaced while the program ran is no
// longer what the plan checked. Such a file is never the source of a
// served number. A recorded file changed in the stage's first round may
// have been changed by anything racing the read, so, like any file changed
// after the plan's check, it is checked again, computed anew, and its units
// predicted again in a second round (recheckAfterRead). One changed in
// that second round, or an unrecorded (ephemeral) one, is the program's
// doing: its units fail with ReasonProgramChangedFile or
// ReasonSharedFileReplaced; the file is handed to the integrity check,
// which keeps it when its contents are still the recorded ones and
// otherwise sets it aside so that the next plan computes it again; and a
// job event says so.

// ViewDir is the folder of the stages' views in a job's folder.
const ViewDir = "view"

// ReasonProgramChangedFile is the error of a unit whose shared cached file
// the method's program changed in place while it ran.
const ReasonProgramChangedFile = "the method's program changed a shared embedding file; its predictions are not served"

// ReasonSharedFileReplaced is the error of a unit whose ephemeral cached
// file (no integrity record is kept) vanished or was replaced while the
// method's program ran: what the program read is not known.
const ReasonSharedFileReplaced = "a shared embedding file this prediction used was replaced while the method ran; its predictions are not served"

// ReasonProgramChangedFiles is the event reason of a stage whose program
// changed shared cached files: `program_changed_shared_files:<n>`.
const ReasonProgramChangedFiles = "program_changed_shared_files"

// viewLink makes one entry of a view: a symbolic link to the shared file.
// A test replaces it to force the copy fallback.
var viewLink = os.Symlink

// stageView is one stage's view of the media root.
type stageView struct {
	root  string
	media string
	// files are the shared files the view gives, by seq id.
	files []viewFile
}

// viewFile is one shared file of a view and its stat when the view was made.
type viewFile struct {
	shared string
	sid    string
	before embedding.FileStat
	linked bool
	// persistent: its family keeps integrity records.
	persistent bool
}

// stageViewDir is MEDIA/jobs/<id>/view/stage-<i>.
func (a *Activities) stageViewDir(jobID string, index int) (string, error) {
	d, err := a.jobDir(jobID)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, ViewDir, "stage-"+strconv.Itoa(index)), nil
}

// buildView makes the stage's view for the sequences of rows (seq ids
// sids): the plan's files of those sequences under sequence_info/, linked
// (or copied), and a private seqmap.sqlite3 with the rows' ids. A view left
// by an attempt that died is removed first.
func (a *Activities) buildView(ctx context.Context, ref StageRef, dir string, rows []methods.EngineRow, sids []string) (*stageView, error) {
	// Absolute paths: the program runs in its own working folder, and the
	// plan's paths are absolute.
	media, err := filepath.Abs(a.Config.MediaRoot)
	if err != nil {
		return nil, err
	}
	root, err := a.stageViewDir(ref.JobID, ref.StageIndex)
	if err != nil {
		return nil, err
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(root); err != nil {
		return nil, fmt.Errorf("stage view: %w", err)
	}
	v := &stageView{root: root, media: media}
	if err := os.MkdirAll(filepath.Join(root, embedding.SequenceInfoDir), 0o755); err != nil {
		return nil, fmt.Errorf("stage view: %w", err)
	}
	var plan struct {
		Expected map[string][]string `json:"expected_paths_by_seq"`
	}
	if err := fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan); err != nil && !errors.Is(err, os.ErrNotExist) {
		v.remove()
		return nil, err
	}
	cache := filepath.Join(media, embedding.SequenceInfoDir) + string(filepath.Separator)
	seen := map[string]bool{}
	for _, sid := range sids {
		if seen[sid] {
			continue
		}
		seen[sid] = true
		for _, p := range plan.Expected[sid] {
			p = filepath.Clean(p)
			if !strings.HasPrefix(p, cache) {
				continue // not the shared cache (never so for a plan's file)
			}
			st, err := embedding.StatFile(p)
			if err != nil {
				// Missing now: the program finds it missing in the view
				// too, and fails or skips the row as it would.
				continue
			}
			fam, _ := embedding.FamilyOf(filepath.ToSlash(strings.TrimPrefix(filepath.Dir(p), cache)))
			vf := viewFile{shared: p, sid: sid, before: st, persistent: fam.Persistent}
			dst := filepath.Join(root, strings.TrimPrefix(p, media))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				v.remove()
				return nil, fmt.Errorf("stage view: %w", err)
			}
			if err := viewLink(p, dst); err == nil {
				vf.linked = true
			} else if err := copyFile(p, dst); err != nil {
				v.remove()
				return nil, fmt.Errorf("stage view: %w", err)
			}
			v.files = append(v.files, vf)
		}
	}
	if err := v.linkShared(a.sharedExtras(media, v)); err != nil {
		v.remove()
		return nil, err
	}
	if len(rows) > 0 {
		if err := a.writeSeqmapInto(ctx, root, rows, sids); err != nil {
			v.remove()
			return nil, err
		}
	}
	return v, nil
}

// sharedExtras are the other shared files a program reads beside its
// planned ones: each linked family folder's manifest.json (the reference's
// presence checks read it) and method A's binding-site table. kinflow
// replaces a manifest by a rename and appends to the table under its lock,
// so neither is checked after the run like a planned file; a program that
// deletes or replaces them through the view removes only its link.
func (a *Activities) sharedExtras(media string, v *stageView) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range v.files {
		m := filepath.Join(filepath.Dir(f.shared), embedding.ManifestName)
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	if a.Layout != nil {
		out = append(out, a.Layout.BindingSiteTable())
	}
	return out
}

// linkShared links each of paths (files under the media root that exist)
// into the view at its place under the media root.
func (v *stageView) linkShared(paths []string) error {
	for _, p := range paths {
		p = filepath.Clean(p)
		rel, err := filepath.Rel(v.media, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue
		}
		dst := filepath.Join(v.root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("stage view: %w", err)
		}
		if err := viewLink(p, dst); err != nil {
			if err := copyFile(p, dst); err != nil {
				return fmt.Errorf("stage view: %w", err)
			}
		}
	}
	return nil
}

// copyFile copies src to dst, read-only: the view's entry where no link
// can be made.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// remove deletes the view (links and copies only: RemoveAll never follows
// a link).
func (v *stageView) remove() {
	if v != nil {
		_ = os.RemoveAll(v.root)
	}
}

// viewChanges is what the check after the run found.
type viewChanges struct {
	// inPlace are the shared files the program wrote in place; replaced
	// the ones that vanished or were replaced while it ran.
	inPlace, replaced []viewFile
}

func (c viewChanges) empty() bool { return len(c.inPlace) == 0 && len(c.replaced) == 0 }

// check stats every shared file of the view again. A persistent file that
// vanished or was replaced is left to the integrity records' check after
// the read (recheckAfterRead), which has it computed again; an ephemeral
// one keeps no record, so it is reported here. With deferInPlace a
// persistent file changed in place is left to that check too.
func (v *stageView) check(deferInPlace bool) viewChanges {
	var c viewChanges
	for _, f := range v.files {
		now, err := embedding.StatFile(f.shared)
		switch {
		case err == nil && now == f.before:
		case err == nil && now.Ino == f.before.Ino && deferInPlace && f.persistent:
		case err == nil && now.Ino == f.before.Ino:
			c.inPlace = append(c.inPlace, f)
		case !f.persistent:
			c.replaced = append(c.replaced, f)
		}
	}
	return c
}

// failedSeqs are the seq ids whose units must not be served, with their reason.
func (c viewChanges) failedSeqs() map[string]string {
	out := map[string]string{}
	for _, f := range c.replaced {
		out[f.sid] = ReasonSharedFileReplaced
	}
	for _, f := range c.inPlace {
		out[f.sid] = ReasonProgramChangedFile
	}
	return out
}

// reportViewChanges hands the shared files the program changed in place
// to the integrity check (a file whose contents are still the recorded
// ones is kept, any other set aside, so the next plan computes it again;
// an ephemeral file, which keeps no record, is set aside) and records a
// job event.
func (a *Activities) reportViewChanges(ctx context.Context, ref StageRef, c viewChanges, units int, log *slog.Logger) error {
	var paths []string
	for _, f := range append(slices.Clone(c.inPlace), c.replaced...) {
		paths = append(paths, f.shared)
	}
	msg := fmt.Sprintf("the method's program changed %d shared embedding file(s) while it ran (%d in place); the %d prediction(s) that used them are not served",
		len(paths), len(c.inPlace), units)
	if a.Layout != nil && len(c.inPlace) > 0 {
		var inPlace []string
		for _, f := range c.inPlace {
			inPlace = append(inPlace, f.shared)
		}
		_, in, err := a.Layout.RecheckChanged(inPlace)
		if err != nil {
			log.Warn("checking the shared files the program changed failed", "error", err)
		} else if len(in.Bad) > 0 {
			msg += "; " + in.Summary(5)
		}
	}
	log.Warn("the method's program changed shared cached files", "files", len(paths), "units", units, "detail", msg)
	st, err := a.Store.Stage(ctx, ref.JobID, ref.StageIndex)
	if err != nil {
		return err
	}
	_, err = a.Store.AddEvent(ctx, &store.JobEvent{
		JobID: ref.JobID, StageIndex: ref.StageIndex, Kind: store.EventGPUPrecompute, MethodKey: st.MethodKey, Target: st.Target,
		Reason: fmt.Sprintf("%s:%d", ReasonProgramChangedFiles, len(paths)), Message: msg, CreatedAt: time.Now().UTC(),
	}, keepEvents)
	return err
}

// writeSeqmapInto writes the rows' seq ids (ids, by row) into the view's
// private sequence_info/seqmap.sqlite3, where the program looks them up.
func (a *Activities) writeSeqmapInto(ctx context.Context, root string, rows []methods.EngineRow, ids []string) error {
	es := make([]seqmapfile.Entry, len(rows))
	for k := range rows {
		es[k] = seqmapfile.Entry{ID: ids[k], Seq: rows[k].Seq}
	}
	if err := seqmapfile.Write(ctx, root, es); err != nil {
		return fmt.Errorf("stage view: %s: %w", seqmapfile.RelPath, err)
	}
	return nil
}
