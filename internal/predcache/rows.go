package predcache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strconv"
	"time"

	"gorm.io/gorm/clause"

	"github.com/kinflow/kinflow/internal/store"
)

// Cached rows: the quota check at submit counts what a job will
// really charge, and a row whose every prediction unit the cache holds is
// refunded at the end. The exact unit keys depend on what only the worker
// knows (fingerprints, the sequence as sent, canonical substrates), so the
// submit reads a ledger instead: a job that completes records, per target,
// the key of each row it fully predicted (RowKey), and a later submit looks
// its rows' keys up. The ledger is an estimate the end of the job corrects:
// a row the cache no longer holds is computed and, at worst, not charged.

// RowSpec is what a row's key shares across the rows of one target of one
// job: the target, its method and model version, and the options that
// change the units the row becomes.
type RowSpec struct {
	Target, Method, ModelVersion string
	Canonicalize                 bool
	HandleLongSequences          string
}

// rowKeyVersion changes whenever the row key's layout changes.
const rowKeyVersion = "kinflow-cachedrows-v1"

// RowKey is the key of one input row for spec: the input's cells by column
// name (in name order, so that a reordered file has the same keys).
func RowKey(spec RowSpec, columns, cells []string) Key {
	w := keyWriter{h: sha256.New(), buf: make([]byte, 0, 24)}
	w.field(rowKeyVersion)
	w.field(spec.Target)
	w.field(spec.Method)
	w.field(spec.ModelVersion)
	w.field(strconv.FormatBool(spec.Canonicalize))
	w.field(spec.HandleLongSequences)
	idx := make([]int, len(columns))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return columns[idx[a]] < columns[idx[b]] })
	w.field(strconv.Itoa(len(idx)))
	for _, i := range idx {
		w.field(columns[i])
		v := ""
		if i < len(cells) {
			v = cells[i]
		}
		w.field(v)
	}
	var out Key
	copy(out[:], w.h.Sum(nil))
	return out
}

// rowsChunk is the most keys per ledger query: well within SQLite's
// 32,766 bound variables, and one index probe each.
const rowsChunk = 500

// cachedRow is the ledger's GORM model.
type cachedRow struct {
	RowKey       []byte `gorm:"primaryKey"`
	Method       string `gorm:"size:64;not null"`
	ModelVersion string `gorm:"size:64;not null"`
	CreatedAtMs  int64  `gorm:"not null"`
}

// TableName implements gorm's Tabler.
func (cachedRow) TableName() string { return "cached_rows" }

// KnownRows reports which of keys the ledger holds: one indexed lookup per
// key, rowsChunk keys a query.
func KnownRows(ctx context.Context, st *store.Store, keys []Key) (map[Key]bool, error) {
	out := make(map[Key]bool, len(keys))
	for lo := 0; lo < len(keys); lo += rowsChunk {
		part := keys[lo:min(len(keys), lo+rowsChunk)]
		args := make([][]byte, len(part))
		for i := range part {
			args[i] = part[i][:]
		}
		var found [][]byte
		if err := st.Unprepared(ctx).Model(&cachedRow{}).Where("row_key IN ?", args).Pluck("row_key", &found).Error; err != nil {
			return nil, fmt.Errorf("look up cached rows: %w", err)
		}
		for _, b := range found {
			var k Key
			copy(k[:], b)
			out[k] = true
		}
	}
	return out, nil
}

// RecordRows adds keys to the ledger (a key already there is kept).
func RecordRows(ctx context.Context, st *store.Store, method, modelVersion string, keys []Key, now time.Time) error {
	for lo := 0; lo < len(keys); lo += rowsChunk {
		part := keys[lo:min(len(keys), lo+rowsChunk)]
		rows := make([]cachedRow, len(part))
		for i := range part {
			rows[i] = cachedRow{RowKey: append([]byte(nil), part[i][:]...), Method: method, ModelVersion: modelVersion, CreatedAtMs: now.UnixMilli()}
		}
		if err := st.DB.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error; err != nil {
			return fmt.Errorf("record cached rows of %s: %w", method, err)
		}
	}
	return nil
}

// RowSpecs are the specs of a job's targets: targets in job order, methods
// by target, version the model version of a method key.
func RowSpecs(targets []string, methods map[string]string, version func(method string) string, canonicalize bool, handleLong string) []RowSpec {
	out := make([]RowSpec, 0, len(targets))
	for _, t := range targets {
		m := methods[t]
		out = append(out, RowSpec{Target: t, Method: m, ModelVersion: version(m), Canonicalize: canonicalize, HandleLongSequences: handleLong})
	}
	return out
}

// RowsHeld counts the rows (cells of each, columns shared) whose key for
// every spec the ledger holds.
func RowsHeld(ctx context.Context, st *store.Store, specs []RowSpec, columns []string, rows [][]string) (int, error) {
	if len(specs) == 0 || len(rows) == 0 {
		return 0, nil
	}
	keys := make([]Key, 0, len(rows)*len(specs))
	for _, cells := range rows {
		for _, sp := range specs {
			keys = append(keys, RowKey(sp, columns, cells))
		}
	}
	known, err := KnownRows(ctx, st, keys)
	if err != nil || len(known) == 0 {
		return 0, err
	}
	held := 0
	for r := range rows {
		all := true
		for _, k := range keys[r*len(specs) : (r+1)*len(specs)] {
			all = all && known[k]
		}
		if all {
			held++
		}
	}
	return held, nil
}

// RecordJobRows records the key of every row for every spec: rows a job
// completed with every prediction made (so the cache holds its units).
func RecordJobRows(ctx context.Context, st *store.Store, specs []RowSpec, columns []string, rows [][]string, now time.Time) error {
	for _, sp := range specs {
		keys := make([]Key, len(rows))
		for i, cells := range rows {
			keys[i] = RowKey(sp, columns, cells)
		}
		if err := RecordRows(ctx, st, sp.Method, sp.ModelVersion, keys, now); err != nil {
			return err
		}
	}
	return nil
}
