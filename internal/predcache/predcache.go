// Package predcache is kinflow's prediction cache (docs/api.md, "Prediction
// cache"): every
// prediction unit the engine computed, keyed by everything that determined
// its value, so that no unit is predicted twice.
//
// A key is the SHA-256 of the unit's target, the method and its
// model_version, the engine's fingerprint, the fingerprint of every
// artefact family the method read, the method's fixed per-target arguments,
// the sequence actually sent (after splitting, trimming and truncation), the
// substrate and product tokens and the engine arguments as sent, and
// whether the engine canonicalises substrates. A change to any of them is
// simply another key: a new model version or fingerprint misses, and
// nothing is ever invalidated in place. The value is the engine's raw value
// or its failure reason for the unit (never both), taken before reductions
// and experimental overrides, with the time it was first computed, and for
// a method that gives uncertainty the unit's uncertainty as the engine gave
// it (migration 0007).
package predcache

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
)

// Key identifies one prediction unit's value.
type Key [sha256.Size]byte

// Value implements driver.Valuer: a key is stored as its 32 bytes (GORM
// would otherwise spread a byte slice over 32 bound variables).
func (k Key) Value() (driver.Value, error) { return k[:], nil }

// Stage is what every unit of one stage shares in its key.
type Stage struct {
	Target            string
	Method            string
	ModelVersion      string
	EngineFingerprint string
	// Families maps each artefact family the method reads to its
	// fingerprint id.
	Families map[string]string
	// FixedArgs is the method's fixed per-target arguments, in a stable
	// text form (the engine's command and its contract, for example).
	FixedArgs string
	// Canonicalize is whether the engine canonicalises substrates before
	// the model sees them.
	Canonicalize bool
}

// Unit is what is particular to one unit.
type Unit struct {
	// Seq is the sequence sent to the model.
	Seq string
	// Substrates and Products are the tokens sent, in the order sent.
	Substrates []string
	Products   []string
	// Kwargs are the engine arguments of the unit.
	Kwargs map[string]string
}

// Keyer makes the keys of one stage's units: the stage's part is hashed
// once.
type Keyer struct {
	prefix [sha256.Size]byte
}

// keyVersion changes whenever the key's layout changes, so that keys made
// by an older layout can never be read as this one's.
const keyVersion = "kinflow-predcache-v1"

// keyWriter hashes length-prefixed fields ("<len>:<bytes>"): no separator
// can be forged by a value. Lists and maps carry their length first; a map's
// entries go in key order.
type keyWriter struct {
	h   hash.Hash
	buf []byte
}

func (w *keyWriter) field(s string) {
	w.buf = strconv.AppendInt(w.buf[:0], int64(len(s)), 10)
	w.buf = append(w.buf, ':')
	w.h.Write(w.buf)
	w.h.Write([]byte(s))
}

func (w *keyWriter) list(xs []string) {
	w.field(strconv.Itoa(len(xs)))
	for _, x := range xs {
		w.field(x)
	}
}

func (w *keyWriter) sortedMap(m map[string]string) {
	keys := slices.Sorted(maps.Keys(m))
	w.field(strconv.Itoa(len(keys)))
	for _, k := range keys {
		w.field(k)
		w.field(m[k])
	}
}

// NewKeyer returns the keyer of stage st.
func NewKeyer(st Stage) *Keyer {
	w := keyWriter{h: sha256.New(), buf: make([]byte, 0, 24)}
	w.field(keyVersion)
	w.field(st.Target)
	w.field(st.Method)
	w.field(st.ModelVersion)
	w.field(st.EngineFingerprint)
	w.sortedMap(st.Families)
	w.field(st.FixedArgs)
	w.field(strconv.FormatBool(st.Canonicalize))
	var k Keyer
	copy(k.prefix[:], w.h.Sum(nil))
	return &k
}

// Key is the key of unit u of the keyer's stage.
func (k *Keyer) Key(u Unit) Key {
	w := keyWriter{h: sha256.New(), buf: make([]byte, 0, 24)}
	w.h.Write(k.prefix[:])
	w.field(u.Seq)
	w.list(u.Substrates)
	w.list(u.Products)
	w.sortedMap(u.Kwargs)
	var out Key
	copy(out[:], w.h.Sum(nil))
	return out
}

// Entry is one cached value: Value, or Error when the engine gave none.
type Entry struct {
	Value *float64
	Error string
	// Uncertainty is the value's uncertainty as the method gave it (nil
	// when it gave none for this unit).
	Uncertainty *units.Uncertainty
	// UncertaintyRecorded is whether the entry was stored with its
	// method's uncertainty (Put.UncertaintyRecorded): false for an entry
	// of a method without uncertainty and for one stored before the cache
	// kept uncertainties, which a method that gives them must not serve.
	UncertaintyRecorded bool
	// FirstComputed is when the value was computed and stored.
	FirstComputed time.Time
}

// Cache is the prediction cache in the application database, with an
// optional memory tier in front of it (WithMemory).
type Cache struct {
	st  *store.Store
	mem *memTier
}

// New returns the cache kept in st (migration 0004_prediction_cache),
// without a memory tier.
func New(st *store.Store) *Cache { return &Cache{st: st} }

// sqliteStoreRows is the most entries per SQLite insert: 11 variables
// each, well within SQLite's 32,766.
const sqliteStoreRows = 100

// lookupChunk is the most keys per lookup query: one query for a
// 10,000-unit stage, and a bounded parameter for larger ones.
const lookupChunk = 20000

// lookupDB returns the database's entries of keys, by key; a missing key
// is absent from the map. The keys travel as one parameter per chunk (a
// JSON array of hex keys on SQLite, a bytea[] on Postgres): binding 10,000
// separate variables cost several times more than the index probes.
func (c *Cache) lookupDB(ctx context.Context, keys []Key) (map[Key]Entry, error) {
	out := make(map[Key]Entry, len(keys))
	sqlDB, err := c.st.DB.DB()
	if err != nil {
		return nil, err
	}
	for from := 0; from < len(keys); from += lookupChunk {
		part := keys[from:min(from+lookupChunk, len(keys))]
		var rows *sql.Rows
		if c.st.Dialect == store.Postgres {
			arg := make([][]byte, len(part))
			for i := range part {
				arg[i] = part[i][:]
			}
			if ok, err := lookupPgx(ctx, sqlDB, arg, out); ok || err != nil {
				if err != nil {
					return nil, fmt.Errorf("look up %d predictions: %w", len(part), err)
				}
				continue
			}
			rows, err = sqlDB.QueryContext(ctx, lookupPostgres, arg)
		} else {
			// The row names its key by its index in the array: no 32-byte
			// key comes back (a third less time than returning the key).
			rows, err = sqlDB.QueryContext(ctx, "SELECT j.key, "+lookupColumns("c.")+" FROM json_each(?) AS j JOIN prediction_cache AS c ON c.unit_key = unhex(j.value)", hexArray(part))
		}
		if err != nil {
			return nil, fmt.Errorf("look up %d predictions: %w", len(part), err)
		}
		for rows.Next() {
			var (
				kb            []byte
				idx           int64
				v             sql.NullFloat64
				e             sql.NullString
				ms            int64
				ut, ua, ue    sql.NullFloat64
				usyn, urecord bool
				key           Key
			)
			dst := any(&kb)
			if c.st.Dialect != store.Postgres {
				dst = &idx
			}
			if err := rows.Scan(dst, &v, &e, &ms, &ut, &ua, &ue, &usyn, &urecord); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read cached prediction: %w", err)
			}
			if c.st.Dialect == store.Postgres {
				copy(key[:], kb)
			} else {
				if idx < 0 || int(idx) >= len(part) {
					rows.Close()
					return nil, fmt.Errorf("read cached prediction: index %d out of range", idx)
				}
				key = part[idx]
			}
			ent := Entry{Error: e.String, FirstComputed: time.UnixMilli(ms).UTC(), UncertaintyRecorded: urecord}
			if v.Valid {
				f := v.Float64
				ent.Value = &f
			}
			ent.Uncertainty = readUncertainty(nullPtr(ut), nullPtr(ua), nullPtr(ue), usyn)
			out[key] = ent
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("look up predictions: %w", err)
		}
	}
	return out, nil
}

// lookupColumns are the columns a lookup reads after the key, with the
// table's alias prefix.
func lookupColumns(alias string) string {
	cols := []string{"value", "error", "created_at_ms", "uncertainty_total", "uncertainty_aleatoric", "uncertainty_epistemic", "uncertainty_synthetic", "uncertainty_recorded"}
	for i := range cols {
		cols[i] = alias + cols[i]
	}
	return strings.Join(cols, ", ")
}

var lookupPostgres = "SELECT unit_key, " + lookupColumns("") + " FROM prediction_cache WHERE unit_key = ANY($1)"

func nullPtr(f sql.NullFloat64) *float64 {
	if !f.Valid {
		return nil
	}
	return &f.Float64
}

// readUncertainty is a stored uncertainty: nil without a total (a unit
// the method gave none, or an entry of a method without uncertainty).
func readUncertainty(total, alea, epi *float64, synthetic bool) *units.Uncertainty {
	if total == nil {
		return nil
	}
	return &units.Uncertainty{Total: *total, Aleatoric: alea, Epistemic: epi, Synthetic: synthetic}
}

// lookupPgx runs the Postgres lookup on pgx's own interface beneath
// database/sql: rows decode in place, which took 10,000 hits from about 53
// to 30 ms on the loaded development machine. It reports false (and the
// caller uses database/sql) when the connection is not pgx's.
func lookupPgx(ctx context.Context, db *sql.DB, arg [][]byte, out map[Key]Entry) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	used := false
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		used = true
		rows, err := sc.Conn().Query(ctx, lookupPostgres, arg)
		if err != nil {
			return err
		}
		var (
			kb            []byte
			v             *float64
			e             *string
			ms            int64
			ut, ua, ue    *float64
			usyn, urecord bool
		)
		_, err = pgx.ForEachRow(rows, []any{&kb, &v, &e, &ms, &ut, &ua, &ue, &usyn, &urecord}, func() error {
			var key Key
			copy(key[:], kb)
			ent := Entry{Value: v, FirstComputed: time.UnixMilli(ms).UTC(), UncertaintyRecorded: urecord,
				Uncertainty: readUncertainty(ut, ua, ue, usyn)}
			if e != nil {
				ent.Error = *e
			}
			out[key] = ent
			// Nil again, so that pgx allocates the next row's values instead
			// of writing into this row's.
			v, e, ut, ua, ue = nil, nil, nil, nil, nil
			return nil
		})
		return err
	})
	return used, err
}

// hexArray is keys as a JSON array of hex strings.
func hexArray(keys []Key) string {
	b := make([]byte, 0, len(keys)*(2*len(Key{})+3)+2)
	b = append(b, '[')
	for i := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = hex.AppendEncode(b, keys[i][:])
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// Put is one entry to store.
type Put struct {
	Key   Key
	Value *float64
	Error string
	// Uncertainty is the value's uncertainty (nil when the method gave
	// none for this unit); only with a Value and UncertaintyRecorded.
	Uncertainty *units.Uncertainty
	// UncertaintyRecorded is true for every entry of a method that gives
	// uncertainty, whether or not this unit got one: it tells this entry
	// from one stored before the cache kept uncertainties.
	UncertaintyRecorded bool
}

// upsert is what a store does with an entry already present: it stands
// (its first-computed time too), unless it was stored without its
// method's uncertainty and the new entry has it, which then replaces it
// whole (value, error, uncertainty and time: one computation).
const upsert = ` ON CONFLICT (unit_key) DO UPDATE SET value = excluded.value, error = excluded.error,
uncertainty_total = excluded.uncertainty_total, uncertainty_aleatoric = excluded.uncertainty_aleatoric,
uncertainty_epistemic = excluded.uncertainty_epistemic, uncertainty_synthetic = excluded.uncertainty_synthetic,
uncertainty_recorded = excluded.uncertainty_recorded, created_at_ms = excluded.created_at_ms
WHERE excluded.uncertainty_recorded AND NOT prediction_cache.uncertainty_recorded`

// dedupe drops entries whose key came earlier in puts (two units of one
// stage with the same key): Postgres refuses an upsert that meets one key
// twice in a statement.
func dedupe(puts []Put) []Put {
	seen := make(map[Key]struct{}, len(puts))
	out := puts[:0:0]
	for _, p := range puts {
		if _, ok := seen[p.Key]; ok {
			continue
		}
		seen[p.Key] = struct{}{}
		out = append(out, p)
	}
	return out
}

// uncertaintyArgs are p's uncertainty columns' values.
func uncertaintyArgs(p Put) (total, alea, epi *float64, synthetic bool) {
	if p.Uncertainty == nil {
		return nil, nil, nil, false
	}
	t := p.Uncertainty.Total
	return &t, p.Uncertainty.Aleatoric, p.Uncertainty.Epistemic, p.Uncertainty.Synthetic
}

// storeDB writes entries for method at modelVersion, stamped now. An entry
// already present is kept (its first-computed time stands): two jobs that
// computed one unit at once store it once; only an entry stored without
// its method's uncertainty is replaced by one with it (upsert). An entry
// with neither a value nor an error is refused, and so is an uncertainty
// without a value or not marked recorded. On Postgres the entries travel as a few array
// parameters; on SQLite as bound variables, 100 entries a statement (a
// JSON array, as lookupDB takes, changes about one value in ten by a unit
// in the last place).
func (c *Cache) storeDB(ctx context.Context, method, modelVersion string, puts []Put, now time.Time) error {
	if len(puts) == 0 {
		return nil
	}
	ms := now.UnixMilli()
	for _, p := range puts {
		if (p.Value == nil) == (p.Error == "") {
			return fmt.Errorf("cache entry %x: want exactly one of a value and an error", p.Key[:4])
		}
		if p.Uncertainty != nil && (p.Value == nil || !p.UncertaintyRecorded) {
			return fmt.Errorf("cache entry %x: an uncertainty needs a value and UncertaintyRecorded", p.Key[:4])
		}
	}
	puts = dedupe(puts)
	sqlDB, err := c.st.DB.DB()
	if err != nil {
		return err
	}
	for from := 0; from < len(puts); from += lookupChunk {
		part := puts[from:min(from+lookupChunk, len(puts))]
		if c.st.Dialect == store.Postgres {
			ks := make([][]byte, len(part))
			vs := make([]*float64, len(part))
			es := make([]*string, len(part))
			uts, uas, ues := make([]*float64, len(part)), make([]*float64, len(part)), make([]*float64, len(part))
			usyn, urec := make([]bool, len(part)), make([]bool, len(part))
			for i := range part {
				ks[i], vs[i] = part[i].Key[:], part[i].Value
				if part[i].Error != "" {
					es[i] = &part[i].Error
				}
				uts[i], uas[i], ues[i], usyn[i] = uncertaintyArgs(part[i])
				urec[i] = part[i].UncertaintyRecorded
			}
			_, err = sqlDB.ExecContext(ctx, `INSERT INTO prediction_cache (unit_key, method, model_version, value, error, created_at_ms,
uncertainty_total, uncertainty_aleatoric, uncertainty_epistemic, uncertainty_synthetic, uncertainty_recorded)
SELECT k, $4, $5, v, e, $6, ut, ua, ue, us, ur
FROM unnest($1::bytea[], $2::float8[], $3::text[], $7::float8[], $8::float8[], $9::float8[], $10::bool[], $11::bool[]) AS u(k, v, e, ut, ua, ue, us, ur)`+upsert,
				ks, vs, es, method, modelVersion, ms, uts, uas, ues, usyn, urec)
		} else {
			// Bound variables, not a JSON array as the lookup takes: SQLite
			// parses a JSON number into a double that is off by one unit in
			// the last place for about one value in ten, and a cached value
			// must be the very double the engine gave.
			for at := 0; at < len(part) && err == nil; at += sqliteStoreRows {
				rows := part[at:min(at+sqliteStoreRows, len(part))]
				var q strings.Builder
				q.WriteString("INSERT INTO prediction_cache (unit_key, method, model_version, value, error, created_at_ms, " +
					"uncertainty_total, uncertainty_aleatoric, uncertainty_epistemic, uncertainty_synthetic, uncertainty_recorded) VALUES ")
				args := make([]any, 0, 11*len(rows))
				for i, p := range rows {
					if i > 0 {
						q.WriteByte(',')
					}
					q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
					var v, e any
					if p.Value != nil {
						v = *p.Value
					}
					if p.Error != "" {
						e = p.Error
					}
					ut, ua, ue, us := uncertaintyArgs(p)
					args = append(args, p.Key[:], method, modelVersion, v, e, ms, floatArg(ut), floatArg(ua), floatArg(ue), us, p.UncertaintyRecorded)
				}
				q.WriteString(upsert)
				_, err = sqlDB.ExecContext(ctx, q.String(), args...)
			}
		}
		if err != nil {
			return fmt.Errorf("store %d predictions: %w", len(part), err)
		}
	}
	return nil
}

// floatArg is a nullable float as a bound variable.
func floatArg(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// ErrNoMethod is returned by Purge without a method.
var ErrNoMethod = errors.New("purge needs a method")

// Purge removes the entries of method (all its versions when version is
// empty) and returns how many.
func (c *Cache) Purge(ctx context.Context, method, version string) (int64, error) {
	if method == "" {
		return 0, ErrNoMethod
	}
	var n int64
	err := c.st.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		q := tx.Where("method = ?", method)
		if version != "" {
			q = q.Where("model_version = ?", version)
		}
		res := q.Delete(&row{})
		if res.Error != nil {
			return res.Error
		}
		n = res.RowsAffected
		// The rows the quota check counts as cached go with their units.
		rq := tx.Where("method = ?", method)
		if version != "" {
			rq = rq.Where("model_version = ?", version)
		}
		if err := rq.Delete(&cachedRow{}).Error; err != nil {
			return err
		}
		// Every process's memory tier drops its entries at its next lookup.
		return tx.Exec("UPDATE prediction_cache_epoch SET epoch = epoch + 1 WHERE id = 1").Error
	})
	if err != nil {
		return 0, fmt.Errorf("purge cached predictions of %s: %w", method, err)
	}
	if c.mem != nil {
		c.mem.clear()
	}
	return n, nil
}

// Count is the number of entries, for method when not empty.
func (c *Cache) Count(ctx context.Context, method string) (int64, error) {
	q := c.st.DB.WithContext(ctx).Model(&row{})
	if method != "" {
		q = q.Where("method = ?", method)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count cached predictions: %w", err)
	}
	return n, nil
}

// row is the table's GORM model, for Purge, Count and the schema test.
type row struct {
	UnitKey      []byte `gorm:"primaryKey"`
	Method       string `gorm:"size:64;not null"`
	ModelVersion string `gorm:"size:64;not null"`
	Value        *float64
	Error        *string
	CreatedAtMs  int64 `gorm:"not null"`
	// The uncertainty columns (migration 0007).
	UncertaintyTotal     *float64
	UncertaintyAleatoric *float64
	UncertaintyEpistemic *float64
	UncertaintySynthetic bool `gorm:"not null;default:false"`
	UncertaintyRecorded  bool `gorm:"not null;default:false"`
}

// TableName implements gorm's Tabler.
func (row) TableName() string { return "prediction_cache" }
