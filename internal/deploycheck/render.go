package deploycheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization in dir (a path on disk) with the kustomize library, as
// `kustomize build dir` (and `kubectl apply -k dir`) would, and returns the objects it outputs in
// their order. Each Manifest's File is dir as given.
func Render(dir string) ([]Manifest, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []Manifest
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, Manifest{File: filepath.ToSlash(dir), Object: obj})
	}
	return out, nil
}

// typed are the Go types of the kinds flagdown deploys that Typed decodes into, by apiVersion and
// kind: Knative Serving's own Service, and Kubernetes' own built-in kinds. Knative Eventing's kinds
// (Broker, Trigger, SinkBinding) have none here; the consistency tests check those fields.
var typed = map[string]func() any{
	servingv1.SchemeGroupVersion.String() + "/Service": func() any { return new(servingv1.Service) },
	"v1/ConfigMap":       func() any { return new(corev1.ConfigMap) },
	"apps/v1/Deployment": func() any { return new(appsv1.Deployment) },
	"batch/v1/Job":       func() any { return new(batchv1.Job) },
	"batch/v1/CronJob":   func() any { return new(batchv1.CronJob) },
}

// Typed decodes m strictly into the Go type of its apiVersion and kind (Knative Serving's Service,
// or a Kubernetes ConfigMap, Deployment, Job or CronJob): a field the type does not have, such as a
// misspelled one, is an error, and so is a value of the wrong type. ok is false, with no error, for
// a kind without a type here.
func Typed(m Manifest) (obj any, ok bool, err error) {
	newObj := typed[Str(m.Object, "apiVersion")+"/"+m.Kind()]
	if newObj == nil {
		return nil, false, nil
	}
	b, err := json.Marshal(m.Object)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %s %s: %w", m.File, m.Kind(), m.Name(), err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	obj = newObj()
	if err := dec.Decode(obj); err != nil {
		return nil, true, fmt.Errorf("%s: %s %s: %w", m.File, m.Kind(), m.Name(), err)
	}
	return obj, true, nil
}

// KnativeService decodes m strictly (as Typed) into Knative Serving's Service type
// (serving.knative.dev/v1); m must be such a Service.
func KnativeService(m Manifest) (*servingv1.Service, error) {
	obj, _, err := Typed(m)
	if err != nil {
		return nil, err
	}
	s, ok := obj.(*servingv1.Service)
	if !ok {
		return nil, fmt.Errorf("%s: %s %s %s is not a %s Service", m.File, Str(m.Object, "apiVersion"), m.Kind(), m.Name(), servingv1.SchemeGroupVersion)
	}
	return s, nil
}

// ValidateKnativeService runs what Knative Serving's admission webhook runs on a new Service, with
// the default configuration and feature flags (no cluster needed): SetDefaults on a copy, then
// Validate as a create. err holds what the webhook would reject the Service for; warnings what it
// would accept with a warning (such as an insecure security context). Both are nil for a clean one.
func ValidateKnativeService(ctx context.Context, s *servingv1.Service) (warnings, err error) {
	c := s.DeepCopy()
	ctx = apis.WithinCreate(ctx)
	c.SetDefaults(ctx)
	fe := c.Validate(ctx)
	if e := fe.Filter(apis.ErrorLevel); e != nil {
		err = fmt.Errorf("Service %s: %w", s.Name, e)
	}
	if w := fe.Filter(apis.WarningLevel); w != nil {
		warnings = fmt.Errorf("Service %s: warning: %w", s.Name, w)
	}
	return warnings, err
}
