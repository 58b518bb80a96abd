package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// deliverLater posts the finished job j to its callback URL in the
// background: retried with doubling back-off on the Manager's clock until
// it answers 2xx or CallbackRetries attempts have failed. The outcome is
// written to the job's record (callback_state "delivered" or "failed"); a
// restarted daemon retries callbacks still "pending".
func (m *Manager) deliverLater(j Job) {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		m.deliver(j)
	}()
}

func (m *Manager) deliver(j Job) {
	body, _ := json.Marshal(j.Wire())
	backoff := m.o.CallbackBackoff
	state := "failed"
	for attempt := 1; attempt <= m.o.CallbackRetries; attempt++ {
		err := m.post(j.Callback, body)
		if err == nil {
			state = "delivered"
			break
		}
		m.log.Warn("job callback failed", "job", j.ID, "url", j.Callback, "attempt", attempt, "err", err)
		if attempt == m.o.CallbackRetries {
			break
		}
		t := m.clock.NewTimer(backoff)
		select {
		case <-t.C():
		case <-m.ctx.Done():
			t.Stop()
			return // still pending: the next daemon delivers it
		}
		backoff *= 2
	}
	// Re-read the record: only the callback state changes.
	r, err := m.load(m.ctx, j.ID)
	if err != nil {
		return
	}
	r.Job.CallbackState = state
	if err := m.put(m.ctx, &r.Job, r.Req, r.Seq); err != nil {
		m.log.Error("job callback state not stored", "job", j.ID, "err", err)
	}
}

func (m *Manager) post(url string, body []byte) error {
	req, err := http.NewRequestWithContext(m.ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.o.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answer %s", resp.Status)
	}
	return nil
}
