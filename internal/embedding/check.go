package embedding

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// CheckFile reports whether path is a well-formed artefact for its suffix:
// .npy needs a header DecodeNPY's parser accepts (any dtype and order, so
// files of the reference's workers pass too) and at least the bytes its shape
// and dtype promise; .pt needs a torch zip archive with a data.pkl entry, or a
// legacy torch pickle. Any other suffix only has to be a non-empty regular
// file. The GPU host runs it on every file a step program wrote and deletes
// what fails: a planner would otherwise count a malformed file as cached.
func CheckFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s: empty file", path)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npy":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h, err := readNPYHeader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		size := h.itemSize()
		if size == 0 {
			return fmt.Errorf("%s: npy dtype %q not understood", path, h.descr)
		}
		if need := h.size + int64(NumElements(h.shape))*size; st.Size() < need {
			return fmt.Errorf("%s: truncated: %d bytes, header promises %d", path, st.Size(), need)
		}
		return nil
	case ".pt":
		return checkTorch(path, st.Size())
	}
	return nil
}

// legacyTorchMagic is the pickled magic number that opens a pre-1.6
// torch.save file (protocol 2 pickle of 0x1950a86a20f9469cfc6c).
var legacyTorchMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// checkTorch accepts a torch.save archive (zip with data.pkl) or a legacy
// torch pickle. Only the structure is checked: method G's and method E's
// files hold more than one tensor, which DecodePT does not read.
func checkTorch(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, min(size, int64(len(legacyTorchMagic))))
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(head, legacyTorchMagic) {
		return nil
	}
	if err := checkTorchReader(f, size); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// checkTorchReader checks that r holds a torch zip archive with data.pkl.
func checkTorchReader(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("not a torch file (neither zip nor legacy pickle): %w", err)
	}
	for _, e := range zr.File {
		if e.Name == "data.pkl" || strings.HasSuffix(e.Name, "/data.pkl") {
			return nil
		}
	}
	return errors.New("torch zip archive without data.pkl")
}
