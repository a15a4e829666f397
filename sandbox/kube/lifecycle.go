package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cove-sandbox/cove/sandbox"
)

// update changes sandbox id's record with change and writes it, again
// from a fresh read if another writer (a replica) came between.
func (r *Runtime) update(ctx context.Context, id string, change func(*record) error) (*record, error) {
	for {
		rec, err := r.getRecord(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := change(rec); err != nil {
			return nil, err
		}
		s, err := r.secret(rec)
		if err != nil {
			return nil, err
		}
		s, err = r.cs.CoreV1().Secrets(r.cfg.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, r.apiErr(fmt.Sprintf("updating sandbox %s", id), err)
		}
		rec.resourceVersion = s.ResourceVersion
		return rec, nil
	}
}

// Stop records the sandbox stopped, deletes its pod and waits until the
// pod is gone (its processes ended). The claim stays.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	defer r.lock(id)()
	if _, err := r.update(ctx, id, func(rec *record) error {
		rec.State = sandbox.StateStopped
		return nil
	}); err != nil {
		return err
	}
	r.conns.cut(id, "")
	if err := r.deletePods(ctx, id); err != nil {
		return sandbox.WrapIDf(id, err, "stopping sandbox %s", id)
	}
	return nil
}

// deletePods deletes sandbox id's pods and waits until they are gone.
func (r *Runtime) deletePods(ctx context.Context, id string) error {
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	sel := metav1.ListOptions{LabelSelector: LabelSandbox + "=" + id}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
		return r.apiErr("deleting its pod", err)
	}
	for {
		l, err := pods.List(ctx, sel)
		if err != nil {
			return r.apiErr("waiting for its pod to end", err)
		}
		if len(l.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Resume starts a new pod on the sandbox's claim, unless one runs.
func (r *Runtime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	defer r.lock(id)()
	rec, p, err := r.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if p != nil {
		if p.Status.Phase != corev1.PodRunning {
			if _, err := r.waitRunning(ctx, p); err != nil {
				return nil, sandbox.WrapIDf(id, err, "resuming sandbox %s", id)
			}
		}
		return r.session(rec), nil
	}
	if !rec.Deadline.IsZero() && time.Now().After(rec.Deadline) {
		return nil, fmt.Errorf("sandbox %q reached its TTL at %s; create a new one or fork it: %w", id, rec.Deadline.Format(time.RFC3339), sandbox.ErrState)
	}
	class, _, err := r.check(ctx, &rec.Spec)
	if err != nil {
		return nil, err
	}
	// A pod left from the last start (ended by itself) goes first.
	if err := r.deletePods(ctx, id); err != nil {
		return nil, sandbox.WrapIDf(id, err, "resuming sandbox %s", id)
	}
	rec, err = r.update(ctx, id, func(rec *record) error {
		rec.State = sandbox.StateRunning
		rec.Gen++
		if rec.Deadline.IsZero() && rec.Spec.TTL > 0 {
			rec.Deadline = time.Now().Add(rec.Spec.TTL)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := r.startPod(ctx, rec, class); err != nil {
		r.update(context.WithoutCancel(ctx), id, func(rec *record) error {
			rec.State = sandbox.StateStopped
			return nil
		})
		r.deletePods(context.WithoutCancel(ctx), id)
		return nil, sandbox.WrapIDf(id, err, "resuming sandbox %s", id)
	}
	return r.session(rec), nil
}

// Delete removes the sandbox: its pod, claim, policy and record.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	defer r.lock(id)()
	if _, err := r.getRecord(ctx, id); err != nil {
		return err
	}
	return r.remove(ctx, id)
}

// remove deletes everything of sandbox id, the record last (its owner
// references would remove the rest too, later).
func (r *Runtime) remove(ctx context.Context, id string) error {
	r.conns.cut(id, "")
	ns := r.cfg.Namespace
	name := objName(id)
	gone := func(err error) bool { return err == nil || apierrors.IsNotFound(err) }
	if err := r.deletePods(ctx, id); err != nil {
		return sandbox.WrapIDf(id, err, "deleting sandbox %s", id)
	}
	if err := r.cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{}); !gone(err) {
		return r.apiErr(fmt.Sprintf("deleting sandbox %s's network policy", id), err)
	}
	if err := r.cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); !gone(err) {
		return r.apiErr(fmt.Sprintf("deleting sandbox %s's workspace", id), err)
	}
	if err := r.cs.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); !gone(err) {
		return r.apiErr(fmt.Sprintf("deleting sandbox %s", id), err)
	}
	r.locks.Delete(id)
	return nil
}

// SetDeadline moves the sandbox's TTL; the lifecycle loop of any Runtime
// on the namespace stops it then.
func (r *Runtime) SetDeadline(ctx context.Context, id string, t time.Time) error {
	defer r.lock(id)()
	_, err := r.update(ctx, id, func(rec *record) error {
		rec.Deadline = t
		return nil
	})
	return err
}

// lifecycle stops, every second, the running sandboxes past their
// deadline.
func (r *Runtime) lifecycle(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelSandbox})
		if err != nil {
			continue
		}
		now := time.Now()
		for i := range l.Items {
			rec, err := parseRecord(&l.Items[i])
			if err != nil || rec.State != sandbox.StateRunning || rec.Deadline.IsZero() || now.Before(rec.Deadline) {
				continue
			}
			r.log.Info("sandbox TTL reached; stopping", "id", rec.ID)
			if err := r.Stop(ctx, rec.ID); err != nil && ctx.Err() == nil {
				r.log.Warn("stopping a sandbox at its TTL", "id", rec.ID, "err", err)
			}
		}
	}
}

// Fork makes a new sandbox with the spec of sandbox id and a copy of its
// workspace (a claim whose dataSource is id's claim). A running source is
// copied as it is: pods cannot be paused.
func (r *Runtime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	rec, err := r.getRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	spec := rec.Spec
	return r.create(ctx, spec, objName(id))
}
